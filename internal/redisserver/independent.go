package redisserver

// StartIndependent starts n redis-server processes that know nothing of each
// other (no replication, no cluster), each on its own free loopback port, as
// the independent masters of a Redlock quorum. On error it stops those it
// started.
func StartIndependent(n int, opts Options) ([]*Server, error) {
	servers := make([]*Server, 0, n)
	for range n {
		s, err := Start(opts)
		if err != nil {
			_ = closeAll(servers)
			return nil, err
		}
		servers = append(servers, s)
	}
	return servers, nil
}
