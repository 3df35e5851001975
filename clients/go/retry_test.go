package hoarddb

// retry_test.go holds the retry rule through a proxy that loses an answer on purpose: a
// read is sent again on a new connection, a write is not, and says its outcome is unknown.

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"go.mongodb.org/mongo-driver/bson"
)

// lossyProxy forwards connections to a server; when armed, it drops the next answer the
// server sends and cuts that connection, as a network failing mid-request would.
type lossyProxy struct {
	ln       net.Listener
	target   string
	armed    int32
	accepted int32
	wg       sync.WaitGroup
}

func newLossyProxy(t *testing.T, target string) *lossyProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() { ln.Close() })
	return p
}

func (p *lossyProxy) port() string {
	_, port, _ := net.SplitHostPort(p.ln.Addr().String())
	return port
}

func (p *lossyProxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		atomic.AddInt32(&p.accepted, 1)
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		go func() { _, _ = io.Copy(server, client); server.Close() }()
		go func() {
			buf := make([]byte, 64*1024)
			for {
				n, err := server.Read(buf)
				if n > 0 {
					if atomic.CompareAndSwapInt32(&p.armed, 1, 0) {
						client.Close() // the answer is lost with the connection
						server.Close()
						return
					}
					if _, werr := client.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					client.Close()
					return
				}
			}
		}()
	}
}

func TestRetryRule(t *testing.T) {
	direct := connect(t, insecureServer.url("", "insecure=true"))
	q := fresh(t, direct, bson.M{"type": "fifo"})
	proxy := newLossyProxy(t, "127.0.0.1:"+insecureServer.port)
	c := connect(t, "hoarddb://127.0.0.1:"+proxy.port()+"/?insecure=true&pool_size=1")
	pq := c.Database("app").Bucket(q.Name)
	if err := pq.Push(ctx(t), bson.M{"n": 1}); err != nil {
		t.Fatal(err)
	}

	// a read whose answer is lost: sent again on a new connection, answered
	atomic.StoreInt32(&proxy.armed, 1)
	before := atomic.LoadInt32(&proxy.accepted)
	n, err := pq.Length(ctx(t))
	if err != nil || n != 1 {
		t.Fatalf("a read whose answer was lost: %d %v", n, err)
	}
	if atomic.LoadInt32(&proxy.accepted) != before+1 {
		t.Fatalf("the read was not sent again on a new connection")
	}

	// a write whose answer is lost: not sent again; the error says the outcome is unknown
	atomic.StoreInt32(&proxy.armed, 1)
	err = pq.Push(ctx(t), bson.M{"n": 2})
	var e *Error
	if !errors.Is(err, ErrConnection) || !errors.As(err, &e) || !e.OutcomeUnknown {
		t.Fatalf("a write whose answer was lost: want CONNECTION_ERROR with OutcomeUnknown, got %v", err)
	}
	if n, err := q.Length(ctx(t)); err != nil || n != 2 {
		t.Fatalf("the write landed once, and was not resent: length %d %v", n, err)
	}
	// and the client carries on
	if err := pq.Push(ctx(t), bson.M{"n": 3}); err != nil {
		t.Fatal(err)
	}
}
