// Package faultproxy is a TCP proxy on loopback that injects network
// faults between clients and a real server: added latency, connection
// resets, a full partition (traffic black-holed), Redis pub/sub connections
// fallen silent while the others work, traffic held back and released in
// order, connections that vanish without a word (a restarted
// host), new connections refused (a dead server on a live host), one
// command slowed (a slow shard) and slow closes.
package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stampede-go/stampede/internal/childproc"
)

// Proxy forwards connections from Addr to a target. It is safe for
// concurrent use.
type Proxy struct {
	addr   string // where clients connect, kept while refusing
	target string

	latency   atomic.Int64                // nanoseconds added before each forwarded chunk
	partition atomic.Bool                 // black-hole traffic while set
	pubsubOff atomic.Bool                 // black-hole pub/sub links' traffic while set
	slowCmd   atomic.Pointer[slowCommand] // see [Proxy.SetSlowCommand]
	onCmd     atomic.Pointer[commandHook] // see [Proxy.OnCommand]
	slowClose atomic.Int64                // nanoseconds to wait before closing a side
	inFlight  atomic.Int64                // chunks read and not yet forwarded or dropped

	mu     sync.Mutex
	ln     net.Listener  // nil while refusing (see [Proxy.SetRefusing])
	hold   chan struct{} // while non-nil, chunks wait for it to be closed
	holdUp chan struct{} // the same, for chunks from the client only
	done   chan struct{} // closed by Close: held chunks stop waiting
	conns  map[net.Conn]struct{}
	links  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New starts a proxy on a free loopback port in front of target. The port
// is drawn below the kernel's ephemeral range (childproc.ListenLow), so
// that no client's socket can take it while the proxy refuses connections.
func New(target string) (*Proxy, error) {
	ln, err := childproc.ListenLow()
	if err != nil {
		return nil, err
	}
	p := &Proxy{addr: ln.Addr().String(), ln: ln, target: target, conns: map[net.Conn]struct{}{}, links: map[*link]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.addr }

// SetRefusing makes the proxy refuse new connections while on: its
// listener is closed, so a client's dial is refused at once ("connection
// refused"), as by a host whose server process died. Connections already
// open are left as they are (kill them with Reset or Vanish). Off, the
// proxy listens again on the same address.
func (p *Proxy) SetRefusing(on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return net.ErrClosed
	}
	if on {
		if p.ln != nil {
			err := p.ln.Close()
			p.ln = nil
			return err
		}
		return nil
	}
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// SetLatency adds d before each chunk forwarded in either direction.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// slowCommand is the command SetSlowCommand slows, and by how much.
type slowCommand struct {
	bulk []byte // the command's name as a RESP bulk string, lower case
	d    time.Duration
}

// SetSlowCommand delays by d each way the requests that carry the Redis
// command name (any case; "" for none) and the reply that follows each on
// its connection, the other traffic unslowed: as a Cluster master that
// holds those commands' keys turns slow while the others stay fast. The
// delay holds the connection's later chunks too, in order.
func (p *Proxy) SetSlowCommand(name string, d time.Duration) {
	if name == "" || d <= 0 {
		p.slowCmd.Store(nil)
		return
	}
	p.slowCmd.Store(&slowCommand{bulk: bulkName(name), d: d})
}

// commandHook is what OnCommand runs, and before which command.
type commandHook struct {
	bulk []byte // the command's name as a RESP bulk string, lower case
	fn   func()
}

// OnCommand runs fn once, before the proxy forwards the first request
// from then on that carries the Redis command name (any case), on the
// goroutine that forwards it: the request reaches the server only once fn
// returned. "" (or a nil fn) disarms a hook that has not run yet. A test
// uses it to act at the moment a client sends a given command (pause the
// client's process while that command's reply is on its way back).
func (p *Proxy) OnCommand(name string, fn func()) {
	if name == "" || fn == nil {
		p.onCmd.Store(nil)
		return
	}
	p.onCmd.Store(&commandHook{bulk: bulkName(name), fn: fn})
}

// bulkName is a command's name as a RESP bulk string, lower case.
func bulkName(name string) []byte {
	lower := strings.ToLower(name)
	return []byte("$" + strconv.Itoa(len(lower)) + "\r\n" + lower + "\r\n")
}

// SetPartition black-holes all traffic (connections stay open, nothing
// arrives) while on, as a network partition does.
func (p *Proxy) SetPartition(on bool) { p.partition.Store(on) }

// SetPubSubSilent black-holes, while on, the traffic of every connection
// on which the client subscribed to a Redis channel (it sent SUBSCRIBE,
// SSUBSCRIBE or PSUBSCRIBE), as a partition does, and only theirs: the
// client's commands still come and go, but no message, heartbeat reply or
// confirmation reaches its subscriptions. A connection counts as one from
// the chunk that carries its first subscription on (that chunk is
// dropped too).
func (p *Proxy) SetPubSubSilent(on bool) { p.pubsubOff.Store(on) }

// SetHold holds back every chunk read from either side while on, as a
// congested path does: nothing arrives and nothing is lost. When it is
// turned off, the held chunks are forwarded in the order they were read,
// each after the latency. Unlike [Proxy.SetPartition] it lets a test decide
// exactly when a message in flight arrives.
func (p *Proxy) SetHold(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.hold == nil:
		p.hold = make(chan struct{})
	case !on && p.hold != nil:
		close(p.hold)
		p.hold = nil
	}
}

// SetHoldRequests is [Proxy.SetHold] for the chunks the clients send
// only: their requests wait while the server's replies and pushed messages
// (pub/sub) already on their way still arrive. It lets a test hold a
// client's command in flight while its subscriptions keep working.
func (p *Proxy) SetHoldRequests(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.holdUp == nil:
		p.holdUp = make(chan struct{})
	case !on && p.holdUp != nil:
		close(p.holdUp)
		p.holdUp = nil
	}
}

// held blocks while the proxy holds traffic back (see [Proxy.SetHold];
// [Proxy.SetHoldRequests] when fromClient) or until it is closed.
func (p *Proxy) held(fromClient bool) {
	for {
		p.mu.Lock()
		hold := p.hold
		if hold == nil && fromClient {
			hold = p.holdUp
		}
		p.mu.Unlock()
		if hold == nil {
			return
		}
		select {
		case <-hold:
		case <-p.done:
			return
		}
	}
}

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

// Vanish makes every open connection die without a word, as when the
// server's host restarts or a NAT forgets the connection: the server side is
// closed, the client side stays open with no FIN (so a client's liveness
// check of an idle connection passes), and the next bytes the client sends
// on it are answered with a TCP RST, as a host that lost the connection's
// state answers. A reply the client still awaits never comes. Connections
// opened later are not affected.
func (p *Proxy) Vanish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.vanished.Store(true)
		_ = l.server.Close()
		delete(p.links, l)
	}
}

// Close stops the proxy and every connection.
func (p *Proxy) Close() error {
	var err error
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.done)
		if p.ln != nil {
			err = p.ln.Close()
			p.ln = nil
		}
	}
	p.mu.Unlock()
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

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		client, err := ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			_ = client.Close()
			continue
		}
		l := &link{client: client, server: server}
		if !p.track(client) || !p.track(server) {
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.mu.Lock()
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(l, client, server)
		go p.pipe(l, server, client)
	}
}

// link is one proxied connection: the client's side and the server's.
type link struct {
	client, server net.Conn
	vanished       atomic.Bool  // see [Proxy.Vanish]
	slowReply      atomic.Int64 // the next reply's delay (see [Proxy.SetSlowCommand])
	pubsub         atomic.Bool  // the client subscribed on it (see [Proxy.SetPubSubSilent])
}

// subscribes reports whether chunk, bytes a client sent, carries a RESP
// command SUBSCRIBE, SSUBSCRIBE or PSUBSCRIBE (a bulk string of that name,
// in any case).
func subscribes(chunk []byte) bool {
	lower := bytes.ToLower(chunk)
	for _, cmd := range [][]byte{[]byte("$9\r\nsubscribe\r\n"), []byte("$10\r\nssubscribe\r\n"), []byte("$10\r\npsubscribe\r\n")} {
		if bytes.Contains(lower, cmd) {
			return true
		}
	}
	return false
}

// pipe copies from src to dst with the faults applied, then closes both;
// on a vanished link it closes only the server's side, and answers the
// client's next bytes with a RST.
func (p *Proxy) pipe(l *link, src, dst net.Conn) {
	defer p.wg.Done()
	defer func() {
		if l.vanished.Load() && src == l.server {
			p.untrack(l.server) // the client's side stays open, silent
			return
		}
		if d := time.Duration(p.slowClose.Load()); d > 0 {
			time.Sleep(d) // the fault itself: a peer that is slow to close
		}
		_ = dst.Close()
		_ = src.Close()
		p.untrack(src)
		p.untrack(dst)
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && l.vanished.Load() && src == l.client {
			if tc, ok := src.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close with a RST
			}
			return
		}
		if n > 0 && src == l.client && !l.pubsub.Load() && subscribes(buf[:n]) {
			l.pubsub.Store(true)
		}
		if n > 0 && src == l.client {
			if h := p.onCmd.Load(); h != nil && bytes.Contains(bytes.ToLower(buf[:n]), h.bulk) && p.onCmd.CompareAndSwap(h, nil) {
				h.fn()
			}
		}
		if n > 0 {
			p.inFlight.Add(1)
			p.held(src == l.client)
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d) // the fault itself: added latency
			}
			if sc := p.slowCmd.Load(); sc != nil && src == l.client && bytes.Contains(bytes.ToLower(buf[:n]), sc.bulk) {
				l.slowReply.Store(int64(sc.d))
				time.Sleep(sc.d) // the fault itself: a slow command
			} else if src == l.server {
				if d := time.Duration(l.slowReply.Swap(0)); d > 0 {
					time.Sleep(d) // and its reply
				}
			}
			var werr error
			if !p.partition.Load() && !(l.pubsub.Load() && p.pubsubOff.Load()) {
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
