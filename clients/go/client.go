package hoarddb

// client.go owns the Client: a pool of connections shared by goroutines, reconnection,
// and the retry rule of the command table.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/bson"
)

// Client is a connection pool to one server, safe for concurrent use by many goroutines;
// their requests are pipelined over its connections. Close it when done. When the URL names
// several servers (hoarddb://h1:7070,h2:7070/), each new connection goes to the first of
// them that can be reached, tried in turn.
//
// Against a cluster (the URL names one of its nodes), each keyed request goes to its
// partition's owner over a pool of connections of its own to that node, opened with the
// URL's options (router.go); route=any in the URL sends every request to the URL's node.
//
// What a call does when a connection fails (as the Python client does):
//
//	found dead before sending          the request goes on a new connection: nothing was sent
//	lost after sending a retryable     sent once more on a new connection (the table's retry
//	operation (a read)                 flag: reads, never writes)
//	lost after sending a write         an *Error CONNECTION_ERROR (or TIMEOUT) with
//	                                   OutcomeUnknown set: never resent; read back first
//
// A server restart closes every connection; the next call opens a new one.
type Client struct {
	opts    *Options
	tlsConf *tls.Config
	// servers are the URL's servers, the first first, with the TLS configuration of each
	// (its host name): every new connection tries them in turn
	servers []server
	cache   saltCache
	slots   []slot
	next    uint32
	closed  int32

	mu   sync.Mutex
	idle []*conn // connections for streams and uploads, one at a time each
	all  map[*conn]struct{}

	router *router // a cluster's map and the pools to its other nodes; nil in those pools themselves
}

type server struct {
	opts    *Options
	tlsConf *tls.Config
}

type slot struct {
	mu sync.Mutex
	c  *conn
}

// Connect opens a client to the server at url (hoarddb://user:password@host:7070/?...; see
// Options), and logs in once, so that a wrong address, certificate or password is an error now.
func Connect(ctx context.Context, url string) (*Client, error) {
	o, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	return ConnectOptions(ctx, o)
}

// ConnectOptions is Connect with Options built by hand.
func ConnectOptions(ctx context.Context, o *Options) (*Client, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.PoolSize < 1 {
		o.PoolSize = 1
	}
	tlsConf, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	c := &Client{opts: o, tlsConf: tlsConf, slots: make([]slot, o.PoolSize), all: map[*conn]struct{}{}}
	for i, s := range o.candidates() {
		conf := tlsConf
		if i > 0 {
			if conf, err = s.tlsConfig(); err != nil {
				return nil, err
			}
		}
		c.servers = append(c.servers, server{opts: s, tlsConf: conf})
	}
	if o.Route != "any" {
		c.router = newRouter(c)
	}
	first, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.slots[0].c = first
	return c, nil
}

// ServerInfo is what the server said in its hello: version, protocol, limits.
func (c *Client) ServerInfo(ctx context.Context) (bson.Raw, error) {
	cn, err := c.shared(ctx)
	if err != nil {
		return nil, err
	}
	return cn.info, nil
}

func (c *Client) dial(ctx context.Context) (*conn, error) {
	cn, err := c.dialFirst(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.all[cn] = struct{}{}
	c.mu.Unlock()
	if atomic.LoadInt32(&c.closed) == 1 {
		cn.close()
		return nil, newError(19, "the client was closed")
	}
	if c.router != nil {
		c.router.connected(cn.info)
	}
	return cn, nil
}

// dialFirst is a connection to the first of the servers that can be reached, tried in turn:
// one refused, unreachable or silent (CONNECTION_ERROR, TIMEOUT) passes to the next, as in
// the Python client. When none can be, the error names every address tried, and says why
// the last one failed in its code.
func (c *Client) dialFirst(ctx context.Context) (*conn, error) {
	var whys []string
	var last *Error
	for _, s := range c.servers {
		cn, err := dial(ctx, s.opts, s.tlsConf, &c.cache)
		if err == nil {
			return cn, nil
		}
		if len(c.servers) == 1 || ended(ctx) || !errors.As(err, &last) || last.Code != 29 && last.Code != 30 {
			return nil, err
		}
		whys = append(whys, last.Message)
	}
	addresses := make([]string, len(c.servers))
	for i, s := range c.servers {
		addresses[i] = s.opts.address()
	}
	return nil, &Error{Code: last.Code, CodeName: last.CodeName, Err: last.Err, Message: fmt.Sprintf(
		"none of the URL's servers could be reached (%s): %s", strings.Join(addresses, ", "),
		strings.Join(whys, "; "))}
}

// shared is a connection of the pool for one request: the slots in turn, each (re)opened
// when it has none or its connection ended.
func (c *Client) shared(ctx context.Context) (*conn, error) {
	if atomic.LoadInt32(&c.closed) == 1 {
		return nil, newError(19, "the client was closed; connect again")
	}
	s := &c.slots[int(atomic.AddUint32(&c.next, 1))%len(c.slots)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil && s.c.alive() {
		return s.c, nil
	}
	if s.c != nil {
		c.forget(s.c)
	}
	s.c = nil
	cn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.c = cn
	return cn, nil
}

// exclusive is a connection for one stream or upload, nobody else's until given back.
func (c *Client) exclusive(ctx context.Context) (*conn, error) {
	if atomic.LoadInt32(&c.closed) == 1 {
		return nil, newError(19, "the client was closed; connect again")
	}
	c.mu.Lock()
	for len(c.idle) > 0 {
		cn := c.idle[len(c.idle)-1]
		c.idle = c.idle[:len(c.idle)-1]
		if cn.alive() {
			c.mu.Unlock()
			return cn, nil
		}
		delete(c.all, cn)
	}
	c.mu.Unlock()
	return c.dial(ctx)
}

// giveBack returns an exclusive connection; one whose stream was not read to its end is closed.
func (c *Client) giveBack(cn *conn, clean bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if clean && cn.alive() && len(c.idle) < 2 && atomic.LoadInt32(&c.closed) == 0 {
		c.idle = append(c.idle, cn)
		return
	}
	delete(c.all, cn)
	cn.close()
}

func (c *Client) forget(cn *conn) {
	c.mu.Lock()
	delete(c.all, cn)
	c.mu.Unlock()
}

// Close closes every connection; later calls fail with ErrClosed, and so do calls waiting for an answer.
func (c *Client) Close() error {
	atomic.StoreInt32(&c.closed, 1)
	c.mu.Lock()
	conns := make([]*conn, 0, len(c.all))
	for cn := range c.all {
		conns = append(conns, cn)
	}
	c.all = map[*conn]struct{}{}
	c.idle = nil
	c.mu.Unlock()
	for _, cn := range conns {
		cn.close()
	}
	if c.router != nil {
		c.router.close()
	}
	return nil
}

// Answer is a whole answer of the server: {ok: 1, result, index_used?, warnings?, explain?}.
type Answer struct {
	Raw bson.Raw
}

// Result is the answer's result, to decode (Decode) or read as it is.
func (a Answer) Result() bson.RawValue { return a.Raw.Lookup("result") }

// Decode decodes the result into v (a pointer: to a struct, bson.M, bson.D, a slice...).
func (a Answer) Decode(v interface{}) error { return decodeValue(a.Result(), v) }

// IndexUsed is the index a search used, or "none — full scan"; empty when the answer has none.
func (a Answer) IndexUsed() string {
	s, _ := a.Raw.Lookup("index_used").StringValueOK()
	return s
}

// Warnings are what the server noted but did not refuse (an option recorded, not enforced).
func (a Answer) Warnings() []string {
	var out []string
	if arr, ok := a.Raw.Lookup("warnings").ArrayOK(); ok {
		values, _ := arr.Values()
		for _, v := range values {
			if s, ok := v.StringValueOK(); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// Do runs one operation document, such as
//
//	bson.D{{"op", "push"}, {"db", "app"}, {"bucket", "Comments"}, {"args", bson.D{{"doc", doc}}}}
//
// and returns its whole answer, or its error. The methods of Database, Bucket and Field
// build these documents; Do is for an operation they do not name.
func (c *Client) Do(ctx context.Context, request bson.D) (Answer, error) {
	op := ""
	for _, e := range request {
		if e.Key == "op" {
			op, _ = e.Value.(string)
		}
	}
	if op == "" {
		return Answer{}, newError(22, "an operation is a document with a string 'op', such as {op: \"push\", db, bucket, args}")
	}
	return c.do(ctx, op, request)
}

// do sends request to its partition's owner when it is keyed and the server a cluster
// (router.go), else on a shared connection to the URL's server; the answer, or its error.
func (c *Client) do(ctx context.Context, op string, request bson.D) (Answer, error) {
	if c.router.enabled() {
		a, err, routed, done := c.router.do(ctx, op, request)
		if done {
			return a, err
		}
		request = routed // (an insert may have been given its key)
	}
	return c.direct(ctx, op, request)
}

// direct sends request on a shared connection to the URL's server, with the retry rule.
func (c *Client) direct(ctx context.Context, op string, request bson.D) (Answer, error) {
	entry, known := operations[op]
	retryable := known && entry.retry
	write := !known || entry.write
	resent, unsent := false, 0
	for {
		if err := ctx.Err(); err != nil {
			return Answer{}, contextError(ctx)
		}
		cn, err := c.shared(ctx)
		if err != nil {
			return Answer{}, err
		}
		cn.busy(1)
		raw, sent, err := cn.roundTrip(ctx, request)
		cn.busy(-1)
		if err == nil {
			if ok, _ := raw.Lookup("ok").AsInt64OK(); ok != 1 {
				return Answer{}, errorFromAnswer(raw)
			}
			return Answer{Raw: raw}, nil
		}
		var e *Error
		if !errors.As(err, &e) {
			return Answer{}, err
		}
		if ended(ctx) {
			return Answer{}, unanswered(contextError(ctx), op, write && sent)
		}
		if !sent && !cn.alive() && unsent < 3 {
			unsent++
			continue // the connection was dead before anything left: a new one carries it
		}
		lost := e.Code == 29 || e.serverClosed
		if lost && retryable && !resent {
			resent = true // a read on a connection that died: once more, on a new one
			continue
		}
		return Answer{}, unanswered(e, op, write && sent)
	}
}

// unanswered is the error of a request whose answer will not come, saying whether it may have been applied.
func unanswered(e *Error, op string, write bool) *Error {
	out := *e
	if write {
		out.OutcomeUnknown = true
		out.Message += "; the " + op + " may or may not have been applied: its answer was lost, and it was not " +
			"sent again. Read back before trying again"
	} else if e.Code == 29 || e.Code == 30 {
		out.Message += "; the " + op + " changed nothing; call it again"
	}
	return &out
}
