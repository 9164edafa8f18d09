package redisserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// SentinelMaster is the name the Sentinels of [StartSentinel] monitor.
const SentinelMaster = "stampede"

// Sentinel is a real Sentinel deployment on loopback, for tests: one
// master, one asynchronous replica and three Sentinels (quorum 2) that
// promote the replica 1 s after the master stops answering.
type Sentinel struct {
	Master, Replica *Server
	Sentinels       []*Server
}

// SentinelAddrs returns the Sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string { return addrs(s.Sentinels) }

// Close stops every process.
func (s *Sentinel) Close() error {
	return closeAll(append([]*Server{s.Master, s.Replica}, s.Sentinels...))
}

// StartSentinel starts the master, its replica and three Sentinels, and
// waits until the replica is in sync and the Sentinels can authorise a
// failover (SENTINEL CKQUORUM).
func StartSentinel() (*Sentinel, error) {
	d := &Sentinel{}
	var err error
	if d.Master, err = Start(Options{Args: []string{"--repl-diskless-sync-delay", "0"}}); err != nil {
		return nil, err
	}
	master := strconv.Itoa(d.Master.port)
	if d.Replica, err = Start(Options{Args: []string{"--replicaof", "127.0.0.1", master, "--repl-diskless-sync-delay", "0"}}); err != nil {
		_ = d.Close()
		return nil, err
	}
	for range 3 {
		s, err := startSentinel(master)
		if err != nil {
			_ = d.Close()
			return nil, err
		}
		d.Sentinels = append(d.Sentinels, s)
	}
	if err := d.wait(30 * time.Second); err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}

func startSentinel(masterPort string) (*Server, error) {
	s, err := newServer(Options{})
	if err != nil {
		return nil, err
	}
	// Sentinel rewrites its configuration file with what it learns.
	s.sentinelConf = filepath.Join(s.dir, "sentinel.conf")
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]s 2\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\n", SentinelMaster, masterPort)
	if err := os.WriteFile(s.sentinelConf, []byte(conf), 0o600); err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, fmt.Errorf("redisserver: sentinel config: %w", err)
	}
	return s.startOnFreePort()
}

// wait polls until the replica is in sync and every Sentinel sees a quorum.
func (d *Sentinel) wait(timeout time.Duration) error {
	// Sentinels discover each other on their own: poll.
	err := pollUntil(timeout, 50*time.Millisecond, func() error {
		info, err := command(d.Replica.Addr(), "INFO replication")
		if err != nil || !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica not in sync: %v", err)
		}
		for _, s := range d.Sentinels {
			r, err := command(s.Addr(), "SENTINEL CKQUORUM "+SentinelMaster)
			if err != nil || !strings.HasPrefix(r, "+OK 3 usable") {
				return fmt.Errorf("sentinel %s: %v %s", s.Addr(), err, strings.TrimSpace(r))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisserver: sentinel deployment not ready: %w", err)
	}
	return nil
}
