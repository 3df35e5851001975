package hoarddb

// conn.go owns one connection to a server: dial, TLS, hello and login, and requests matched
// to their answers by id, so that many goroutines pipeline over it.

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/bson"
)

const (
	protocolVersion = 1
	// maxMessage is the largest message either side sends: a 16 MiB document and its request.
	maxMessage = 16*1024*1024 + 64*1024
	// chunkSize is the bytes of blob data in one chunk message, both ways.
	chunkSize = 1024 * 1024
	// inlineBlobMax is the most blob data a put carries inline; more is uploaded in chunks.
	inlineBlobMax = 4 * 1024 * 1024
	clientName    = "hoarddb-go/0.1"
)

// conn is one open, logged-in connection. A reader goroutine files every answer for the
// request waiting on its id; writes are whole messages under a lock.
type conn struct {
	opts *Options
	nc   net.Conn
	info bson.Raw // what the server said in its hello

	wmu     sync.Mutex
	mu      sync.Mutex
	pending map[int64]chan bson.Raw
	lastID  int64
	dead    chan struct{} // closed when the connection is finished
	err     error         // why, once dead
	// exclusive connections carry a stream or an upload, one at a time
	inflight int32
}

// dial opens a connection, shakes hands and logs in.
func dial(parent context.Context, o *Options, tlsConf *tls.Config, cache *saltCache) (*conn, error) {
	c, err := dialWithin(parent, o, tlsConf, cache)
	if err != nil && ended(parent) { // the caller's context ended, not the connect_timeout
		return nil, contextError(parent)
	}
	return c, err
}

func dialWithin(parent context.Context, o *Options, tlsConf *tls.Config, cache *saltCache) (*conn, error) {
	ctx, cancel := context.WithTimeout(parent, o.ConnectTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", o.address())
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, &Error{Code: 30, CodeName: "TIMEOUT", Err: err, Message: fmt.Sprintf(
				"no answer from %s within %s (connect_timeout)", o.address(), o.ConnectTimeout)}
		}
		return nil, &Error{Code: 29, CodeName: "CONNECTION_ERROR", Err: err, Message: fmt.Sprintf(
			"cannot connect to %s: %v; is the server running, on this host and port?", o.address(), err)}
	}
	if tlsConf != nil {
		tc := tls.Client(nc, tlsConf)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			var he *Error
			if errors.As(err, &he) {
				return nil, he
			}
			hint := "if the server runs with --insecure, connect with insecure=true; if its certificate is " +
				"self-signed, pin it with tls_fingerprint (printed at the server's start) or give tls_ca=DATA/tls/server.crt"
			return nil, &Error{Code: 29, CodeName: "CONNECTION_ERROR", Err: err, Message: fmt.Sprintf(
				"TLS handshake with %s failed (%v): %s", o.address(), err, hint)}
		}
		nc = tc
	}
	c := &conn{opts: o, nc: nc, pending: map[int64]chan bson.Raw{}, dead: make(chan struct{})}
	if deadline, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(deadline)
	}
	if err := c.handshake(cache); err != nil {
		nc.Close()
		var he *Error
		if errors.As(err, &he) {
			return nil, err
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return nil, &Error{Code: 30, CodeName: "TIMEOUT", Err: err, Message: fmt.Sprintf(
				"no handshake answer from %s within %s; is it a hoardDB server?", o.address(), o.ConnectTimeout)}
		}
		return nil, &Error{Code: 29, CodeName: "CONNECTION_ERROR", Err: err, Message: fmt.Sprintf(
			"%s closed the connection during the handshake (%v); is it a hoardDB server, and does it speak "+
				"TLS as this client expects (insecure=%v)?", o.address(), err, o.Insecure)}
	}
	_ = nc.SetDeadline(time.Time{})
	go c.readLoop()
	return c, nil
}

// handshake sends hello, then SCRAM-SHA-256 when the server asks for a login; synchronous.
func (c *conn) handshake(cache *saltCache) error {
	hello, err := c.exchange(bson.D{{Key: "op", Value: "hello"}, {Key: "protocol", Value: protocolVersion},
		{Key: "client", Value: clientName}})
	if err != nil {
		return err
	}
	c.info, _ = hello.Lookup("result").DocumentOK()
	auth, _ := c.info.Lookup("auth").ArrayOK()
	if values, _ := auth.Values(); len(values) == 0 {
		return nil // an --insecure server: READY now
	}
	if c.opts.User == "" {
		return newError(27, "the server at %s requires a login: give user:password in the URL "+
			"(hoarddb://USER:PASSWORD@host/), or HOARDDB_PASSWORD", c.opts.address())
	}
	s := newScram(c.opts.User, c.opts.Password, cache)
	first, err := c.exchange(bson.D{{Key: "op", Value: "auth_start"}, {Key: "mechanism", Value: "SCRAM-SHA-256"},
		{Key: "payload", Value: s.first()}})
	if err != nil {
		return err
	}
	serverFirst, _ := first.Lookup("result", "payload").StringValueOK()
	final, err := s.final(serverFirst)
	if err != nil {
		return err
	}
	last, err := c.exchange(bson.D{{Key: "op", Value: "auth_continue"}, {Key: "payload", Value: final}})
	if err != nil {
		return err
	}
	serverFinal, _ := last.Lookup("result", "payload").StringValueOK()
	return s.verify(serverFinal)
}

// exchange sends one handshake message and reads its answer (no reader goroutine yet).
func (c *conn) exchange(doc bson.D) (bson.Raw, error) {
	c.lastID++
	data, err := bson.Marshal(append(bson.D{{Key: "id", Value: c.lastID}}, doc...))
	if err != nil {
		return nil, err
	}
	if _, err := c.nc.Write(data); err != nil {
		return nil, err
	}
	answer, err := readFrame(c.nc)
	if err != nil {
		return nil, err
	}
	if ok, _ := answer.Lookup("ok").AsInt64OK(); ok != 1 {
		return nil, errorFromAnswer(answer)
	}
	return answer, nil
}

// readFrame reads one BSON document off the stream; its int32 length is the framing.
func readFrame(r io.Reader) (bson.Raw, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(head[:]))
	if n < 5 || n > maxMessage {
		return nil, newError(31, "the server sent a message of %d bytes, outside 5..%d: not a hoardDB message", n, maxMessage)
	}
	buf := make([]byte, n)
	copy(buf, head[:])
	if _, err := io.ReadFull(r, buf[4:]); err != nil {
		return nil, err
	}
	return bson.Raw(buf), nil
}

func answerID(doc bson.Raw) (int64, bool) {
	v, err := doc.LookupErr("id")
	if err != nil {
		return 0, false
	}
	return v.AsInt64OK()
}

// readLoop files each answer for its request until the connection ends.
func (c *conn) readLoop() {
	for {
		doc, err := readFrame(c.nc)
		if err != nil {
			c.fail(&Error{Code: 29, CodeName: "CONNECTION_ERROR", Err: err,
				Message: fmt.Sprintf("the connection to %s was lost (%v)", c.opts.address(), err)})
			return
		}
		id, ok := answerID(doc)
		if !ok { // id: null, the server closes the connection and says why
			err := errorFromAnswer(doc)
			var e *Error
			if errors.As(err, &e) {
				e.serverClosed = true
			}
			c.fail(err)
			return
		}
		c.mu.Lock()
		ch := c.pending[id]
		c.mu.Unlock()
		if ch == nil {
			continue // its caller gave up (its context ended): dropped
		}
		select {
		case ch <- doc: // a stream's channel blocks here when its reader is behind: backpressure
		case <-c.dead:
			return
		}
	}
}

// fail finishes the connection with err; every caller still waiting hears of it.
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.dead)
	}
	c.mu.Unlock()
	c.nc.Close()
}

func (c *conn) alive() bool {
	select {
	case <-c.dead:
		return false
	default:
		return true
	}
}

func (c *conn) close() {
	c.fail(newError(19, "the client was closed"))
}

// register reserves a request id and the channel its answers come on.
func (c *conn) register(capacity int) (int64, chan bson.Raw) {
	ch := make(chan bson.Raw, capacity)
	c.mu.Lock()
	c.lastID++
	id := c.lastID
	c.pending[id] = ch
	c.mu.Unlock()
	return id, ch
}

func (c *conn) unregister(id int64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// send writes one request with its id; sent says whether any of it left (a connection
// found dead first sends nothing, and the request may go on another).
func (c *conn) send(id int64, doc bson.D) (sent bool, err error) {
	data, err := bson.Marshal(append(bson.D{{Key: "id", Value: id}}, doc...))
	if err != nil {
		return false, &Error{Code: 2, CodeName: "BAD_VALUE", Err: err, Message: "cannot encode the request as BSON: " + err.Error()}
	}
	if len(data) > maxMessage {
		return false, newError(14, "the request is %d bytes, over the %d a message may hold", len(data), maxMessage)
	}
	return c.write(data)
}

func (c *conn) write(data []byte) (bool, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.alive() {
		return false, c.err
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.opts.Timeout))
	n, err := c.nc.Write(data)
	if err != nil {
		lost := &Error{Code: 29, CodeName: "CONNECTION_ERROR", Err: err,
			Message: fmt.Sprintf("the connection to %s was lost while sending (%v)", c.opts.address(), err)}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			lost = &Error{Code: 30, CodeName: "TIMEOUT", Err: err, Message: fmt.Sprintf(
				"the server at %s took none of our request for %s (timeout); the connection is closed",
				c.opts.address(), c.opts.Timeout)}
		}
		c.fail(lost)
		return n > 0, lost
	}
	return true, nil
}

// receive waits for the next message on ch: an answer, the connection's end, the
// context's end, or the timeout (after which the connection is closed, as the server is silent).
func (c *conn) receive(ctx context.Context, id int64, ch chan bson.Raw) (bson.Raw, error) {
	timer := time.NewTimer(c.opts.Timeout)
	defer timer.Stop()
	select {
	case doc := <-ch:
		return doc, nil
	case <-c.dead:
		select {
		case doc := <-ch: // it came before the end
			return doc, nil
		default:
		}
		return nil, c.err
	case <-ctx.Done():
		c.unregister(id)
		return nil, contextError(ctx)
	case <-timer.C:
		err := &Error{Code: 30, CodeName: "TIMEOUT", Message: fmt.Sprintf("the server at %s sent nothing for %s "+
			"while an answer was due (timeout); the connection is closed", c.opts.address(), c.opts.Timeout)}
		c.fail(err)
		return nil, err
	}
}

// roundTrip sends one request and waits for its one answer.
func (c *conn) roundTrip(ctx context.Context, doc bson.D) (answer bson.Raw, sent bool, err error) {
	id, ch := c.register(1)
	sent, err = c.send(id, doc)
	if err != nil {
		c.unregister(id)
		return nil, sent, err
	}
	answer, err = c.receive(ctx, id, ch)
	c.unregister(id)
	return answer, true, err
}

// ended is whether ctx is done, or its deadline has passed (a dial's deadline taken from it
// may fire a moment before the context's own timer).
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

func contextError(ctx context.Context) *Error {
	err := ctx.Err()
	if err == nil {
		err = context.DeadlineExceeded
	}
	return &Error{Code: 30, CodeName: "TIMEOUT", Err: err, Message: "the call's context ended: " + err.Error()}
}

// busy counts a request in flight (for the pool's choice of a connection).
func (c *conn) busy(delta int32) { atomic.AddInt32(&c.inflight, delta) }
