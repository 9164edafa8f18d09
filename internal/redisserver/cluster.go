package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Cluster is a real Redis Cluster on loopback, for tests: masters first,
// then their replicas.
type Cluster struct {
	Nodes []*Server
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string { return addrs(c.Nodes) }

func addrs(servers []*Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr()
	}
	return out
}

// Close stops every node.
func (c *Cluster) Close() error { return closeAll(c.Nodes) }

// closeAll closes every server that was started (non-nil).
func closeAll(servers []*Server) error {
	var errs []error
	for _, s := range servers {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// StartCluster starts masters×(1+replicas) redis-server nodes with cluster
// mode on, joins them with redis-cli --cluster create (replicas per master),
// and waits for cluster_state:ok. A node that stops being reachable is
// failed over after 2 s (cluster-node-timeout).
func StartCluster(masters, replicas int) (*Cluster, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("%w: redis-cli (Debian's redis-tools package): %w", ErrNoBinary, err)
	}
	c := &Cluster{}
	for range masters * (1 + replicas) {
		port, err := clusterPort()
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		s, err := startOn(port, Options{Args: []string{"--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			// A replica syncs at once (not after the 5 s diskless delay): one
			// that never synced cannot be promoted.
			"--repl-diskless-sync-delay", "0"}})
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redisserver: redis-cli --cluster create: %w: %s", err, out)
	}
	if err := c.WaitOK(30 * time.Second); err != nil {
		_ = c.Close()
		return nil, err
	}
	if err := c.waitReplicasSynced(masters*replicas, 30*time.Second); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// waitReplicasSynced waits until want nodes are replicas whose link to
// their master is up. Right after --cluster create a node that is to be a
// replica may still report itself a master: counting them catches that.
func (c *Cluster) waitReplicasSynced(want int, timeout time.Duration) error {
	// Replication starts on its own: poll.
	return pollUntil(timeout, 20*time.Millisecond, func() error {
		synced := 0
		for _, n := range c.Nodes {
			info, err := command(n.Addr(), "INFO replication")
			if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
				synced++
			}
		}
		if synced != want {
			return fmt.Errorf("redisserver: %d of %d replicas in sync", synced, want)
		}
		return nil
	})
}

// WaitOK waits until every running node reports cluster_state:ok, after a
// start or a failover.
func (c *Cluster) WaitOK(timeout time.Duration) error {
	// The cluster converges on its own: poll.
	return pollUntil(timeout, 20*time.Millisecond, func() error {
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			info, err := command(n.Addr(), "CLUSTER INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("redisserver: cluster not ok on %s: %v %s", n.Addr(), err, info)
			}
		}
		return nil
	})
}

// pollUntil calls ready every interval until it returns nil, or returns
// its last error once timeout has passed: for processes that converge on
// their own (a cluster, replication, Sentinels).
func pollUntil(timeout, interval time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval)
	}
}

// clusterPort finds a loopback port p with p and its cluster bus port
// p+10000 both free, both below the kernel's ephemeral range (see
// childproc.FreePort): a node killed and started again on them does not
// find them taken by some client's socket.
func clusterPort() (int, error) {
	for range 200 {
		p := 12000 + rand.N(10000)
		a, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		a.Close()
		if err != nil {
			continue
		}
		b.Close()
		return p, nil
	}
	return 0, errors.New("redisserver: no free port pair for a cluster node")
}

// startOn starts a server on a given port.
func startOn(port int, opts Options) (*Server, error) {
	s, err := newServer(opts)
	if err != nil {
		return nil, err
	}
	s.port = port
	if err := s.start(); err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, err
	}
	return s, nil
}

// command sends one inline command and returns the whole reply text.
func command(addr, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(head, "$") {
		return head, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || n < 0 {
		return head, err
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
