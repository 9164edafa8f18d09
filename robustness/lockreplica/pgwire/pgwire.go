// Package pgwire is the smallest PostgreSQL client the lock workload needs:
// the simple query protocol (version 3) over one TCP connection, trust
// authentication, text results. The robustness suite uses it instead of a
// driver so that the library's module takes on no dependency for a test
// workload; it is not meant for anything else.
package pgwire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Conn is one connection. It is not safe for concurrent use.
type Conn struct {
	c net.Conn
	r *bufio.Reader
}

// Error is an ErrorResponse from the server.
type Error struct {
	Code, Message string
}

func (e *Error) Error() string { return fmt.Sprintf("postgres: %s (SQLSTATE %s)", e.Message, e.Code) }

// Result is what a query returned: its rows (text values, nil for NULL) and
// its command tag ("UPDATE 1", "INSERT 0 1", "SELECT 3").
type Result struct {
	Rows [][]*string
	Tag  string
}

// Connect opens a connection to addr (host:port) as user to database,
// which must accept it without a password (trust authentication).
func Connect(ctx context.Context, addr, user, database string) (*Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn := &Conn{c: c, r: bufio.NewReader(c)}
	if err := conn.startup(ctx, user, database); err != nil {
		_ = c.Close()
		return nil, err
	}
	return conn, nil
}

// Close ends the connection.
func (c *Conn) Close() error { return c.c.Close() }

func (c *Conn) startup(ctx context.Context, user, database string) error {
	stop := c.bound(ctx)
	defer stop()
	var body []byte
	body = binary.BigEndian.AppendUint32(body, 196608) // protocol 3.0
	for _, kv := range []string{"user", user, "database", database} {
		body = append(append(body, kv...), 0)
	}
	body = append(body, 0)
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(body)+4))
	if _, err := c.c.Write(append(msg, body...)); err != nil {
		return err
	}
	for {
		t, b, err := c.read()
		if err != nil {
			return err
		}
		switch t {
		case 'R':
			if len(b) < 4 || binary.BigEndian.Uint32(b) != 0 {
				return errors.New("pgwire: the server asks for a password; only trust authentication is supported")
			}
		case 'E':
			return parseError(b)
		case 'Z':
			return nil
		}
	}
}

// Query runs sql (one statement, no parameters: the caller formats
// numbers into it) within ctx. A connection whose query failed on the
// network must be closed.
func (c *Conn) Query(ctx context.Context, sql string) (*Result, error) {
	stop := c.bound(ctx)
	defer stop()
	body := append([]byte(sql), 0)
	msg := append([]byte{'Q'}, binary.BigEndian.AppendUint32(nil, uint32(len(body)+4))...)
	if _, err := c.c.Write(append(msg, body...)); err != nil {
		return nil, err
	}
	res := &Result{}
	var qerr error
	for {
		t, b, err := c.read()
		if err != nil {
			return nil, err
		}
		switch t {
		case 'D':
			row, err := parseRow(b)
			if err != nil {
				return nil, err
			}
			res.Rows = append(res.Rows, row)
		case 'C':
			res.Tag = strings.TrimRight(string(b), "\x00")
		case 'E':
			qerr = parseError(b)
		case 'Z':
			if qerr != nil {
				return nil, qerr
			}
			return res, nil
		}
	}
}

// bound makes the connection's reads and writes end with ctx; the returned
// function undoes it.
func (c *Conn) bound(ctx context.Context) func() {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		_ = c.c.SetDeadline(time.Time{})
	}
}

func (c *Conn) read() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
	if n < 0 || n > 64<<20 {
		return 0, nil, fmt.Errorf("pgwire: message of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return 0, nil, err
	}
	return hdr[0], b, nil
}

func parseRow(b []byte) ([]*string, error) {
	if len(b) < 2 {
		return nil, errors.New("pgwire: short DataRow")
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	row := make([]*string, n)
	for i := range n {
		if len(b) < 4 {
			return nil, errors.New("pgwire: short DataRow")
		}
		l := int(int32(binary.BigEndian.Uint32(b)))
		b = b[4:]
		if l < 0 {
			continue
		}
		if len(b) < l {
			return nil, errors.New("pgwire: short DataRow")
		}
		v := string(b[:l])
		row[i] = &v
		b = b[l:]
	}
	return row, nil
}

func parseError(b []byte) error {
	e := &Error{}
	for len(b) > 1 {
		field := b[0]
		end := 1
		for end < len(b) && b[end] != 0 {
			end++
		}
		v := string(b[1:end])
		switch field {
		case 'C':
			e.Code = v
		case 'M':
			e.Message = v
		}
		if end >= len(b) {
			break
		}
		b = b[end+1:]
	}
	return e
}
