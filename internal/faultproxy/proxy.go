// Package faultproxy is a TCP proxy on loopback that injects network
// faults between clients and a real server: added latency, connection
// resets, a full partition (traffic black-holed) and slow closes.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from Addr to a target. It is safe for
// concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	latency   atomic.Int64 // nanoseconds added before each forwarded chunk
	partition atomic.Bool  // black-hole traffic while set
	slowClose atomic.Int64 // nanoseconds to wait before closing a side
	inFlight  atomic.Int64 // chunks read and not yet forwarded or dropped

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New starts a proxy on a free loopback port in front of target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency adds d before each chunk forwarded in either direction.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// SetPartition black-holes all traffic (connections stay open, nothing
// arrives) while on, as a network partition does.
func (p *Proxy) SetPartition(on bool) { p.partition.Store(on) }

// InFlight returns how many chunks the proxy has read from one side and not
// yet forwarded to the other (or dropped): messages held by the latency.
func (p *Proxy) InFlight() int { return int(p.inFlight.Load()) }

// SetSlowClose delays closing the other side of a connection by d.
func (p *Proxy) SetSlowClose(d time.Duration) { p.slowClose.Store(int64(d)) }

// Reset closes every open connection with a TCP RST.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// Close stops the proxy and every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(client, server)
		go p.pipe(server, client)
	}
}

// pipe copies from src to dst with the faults applied, then closes both.
func (p *Proxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	defer func() {
		if d := time.Duration(p.slowClose.Load()); d > 0 {
			time.Sleep(d) // the fault itself: a peer that is slow to close
		}
		_ = dst.Close()
		_ = src.Close()
		p.untrack(src)
		p.untrack(dst)
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.inFlight.Add(1)
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d) // the fault itself: added latency
			}
			var werr error
			if !p.partition.Load() {
				_, werr = dst.Write(buf[:n])
			}
			p.inFlight.Add(-1)
			if werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}
