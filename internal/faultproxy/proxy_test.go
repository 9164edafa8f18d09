package faultproxy_test

import (
	"bufio"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stampede-go/stampede/internal/faultproxy"
	"github.com/stampede-go/stampede/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// echo is a line echo server on loopback.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func roundTrip(c net.Conn, deadline time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(deadline))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestFaults(t *testing.T) {
	p, err := faultproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, time.Second); err != nil || strings.TrimSpace(got) != "ping" {
		t.Fatalf("%q %v", got, err)
	}
	p.SetPartition(true)
	if _, err := roundTrip(c, 100*time.Millisecond); err == nil {
		t.Fatal("a partitioned connection answered")
	}
	p.SetPartition(false)
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(c2, time.Second); err != nil {
		t.Fatalf("after the partition healed: %v", err)
	}
	p.Reset()
	if _, err := roundTrip(c2, time.Second); err == nil {
		t.Fatal("a reset connection answered")
	}
}

// A vanished connection looks alive to its client until it sends, then it
// is reset; connections opened afterwards work.
func TestVanish(t *testing.T) {
	p, err := faultproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, time.Second); err != nil {
		t.Fatal(err)
	}
	p.Vanish()
	// A FIN would make this read end with io.EOF before the RST.
	if got, err := roundTrip(c, 5*time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a vanished connection: %q %v, want a reset", got, err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(c2, time.Second); err != nil {
		t.Fatalf("a connection opened after Vanish: %v", err)
	}
}
