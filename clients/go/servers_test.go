package hoarddb

// servers_test.go: a URL naming several servers, read and connected to in turn.

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
)

func TestURLOfSeveralServers(t *testing.T) {
	o, err := ParseURL("hoarddb://ann:p%40ss@h1:7080,h2:7071,h3,[::1]:7072,[fe80::2],10.0.0.5:7073/?insecure=false" +
		"&tls_fingerprint=" + strings.Repeat("ab", 32))
	want := []Server{{"h2", 7071}, {"h3", DefaultPort}, {"::1", 7072}, {"fe80::2", DefaultPort}, {"10.0.0.5", 7073}}
	if err != nil || o.Host != "h1" || o.Port != 7080 || o.User != "ann" || o.Password != "p@ss" ||
		!reflect.DeepEqual(o.Others, want) || o.TLSFingerprint == "" {
		t.Fatalf("%+v %v", o, err)
	}
	all := o.candidates()
	var addresses []string
	for _, c := range all {
		addresses = append(addresses, c.address())
		if c.Others != nil || c.User != "ann" || c.TLSFingerprint != o.TLSFingerprint {
			t.Errorf("a server to try has its own others, or not the URL's options: %+v", c)
		}
	}
	if got := strings.Join(addresses, " "); got != "h1:7080 h2:7071 h3:7070 [::1]:7072 [fe80::2]:7070 10.0.0.5:7073" {
		t.Errorf("the servers in turn: %s", got)
	}
	o, err = ParseURL("hoarddb://[::1],db.example/")
	if err != nil || o.Host != "::1" || o.Port != DefaultPort || !reflect.DeepEqual(o.Others, []Server{{"db.example", DefaultPort}}) {
		t.Fatalf("%+v %v", o, err)
	}
	o, err = ParseURL("hoarddb://h1:7070/")
	if err != nil || o.Others != nil {
		t.Fatalf("one server has no others: %+v %v", o, err)
	}
	for _, url := range []string{
		"hoarddb://h1:7070,h2:port/", "hoarddb://h1:7070,h2:99999/", "hoarddb://h1:7070,h2:0/",
		"hoarddb://h1:7070,/", "hoarddb://h1:7070,,h2/", "hoarddb://h1,h2:/", "hoarddb://h1,h 2/",
		"hoarddb://h1,::1/", "hoarddb://h1,[::1/", "hoarddb://h1,[::1]x/", "hoarddb://h1,[10.0.0.1]/",
		"hoarddb://ann:secret@,h2/",
	} {
		_, err := ParseURL(url)
		if !errors.Is(err, ErrBadValue) || !strings.Contains(err.Error(), "several servers are written "+
			"hoarddb://h1:7070,h2:7070/") {
			t.Errorf("%s: want BAD_VALUE naming the form of several servers, got %v", url, err)
		}
	}
	_, err = ParseURL("hoarddb://ann:secret@h1,h2:x/")
	if err == nil || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), `"h2:x"`) {
		t.Errorf("the refusal names the bad server and never the password: %v", err)
	}
	// Options built by hand are checked too
	bad := &Options{Host: "h1", Port: 7070, Insecure: true, Others: []Server{{"h2", 0}}}
	if _, err := ConnectOptions(ctx(t), bad); !errors.Is(err, ErrBadValue) {
		t.Errorf("a server of port 0: %v", err)
	}
}

// closedPort is a port of 127.0.0.1 nothing listens on: one just closed.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	return port
}

func TestConnectPassesADownServer(t *testing.T) {
	down := closedPort(t)
	for _, s := range []*testServer{tlsServer, insecureServer} {
		user, query := "admin:s3cret%20pass@", "tls_fingerprint="+tlsServer.fingerprint
		if s.insecure {
			user, query = "", "insecure=true"
		}
		url := fmt.Sprintf("hoarddb://%s127.0.0.1:%s,127.0.0.1:%s/?pool_size=2&%s", user, down, s.port, query)
		c := connect(t, url)
		db := c.Database("app")
		b := fresh(t, c, map[string]string{"type": "hash"})
		if _, err := b.Insert(ctx(t), map[string]string{"_id_": "k", "v": "here"}); err != nil {
			t.Fatalf("%s: insert: %v", url, err)
		}
		var got map[string]interface{}
		if found, err := db.Bucket(b.Name).Get(ctx(t), "k", &got); err != nil || !found || got["v"] != "here" {
			t.Fatalf("%s: get: %v %v %v", url, got, found, err)
		}
		// every connection of the pool, and a stream's own, passes the down server too
		for i := 0; i < 4; i++ {
			if _, err := c.Databases(ctx(t)); err != nil {
				t.Fatalf("%s: %v", url, err)
			}
		}
		if c.router != nil && c.router.enabled() {
			t.Errorf("a single server reached second is routed: %+v", c.router)
		}
	}
}

func TestConnectToNoServerNamesThemAll(t *testing.T) {
	a, b := closedPort(t), closedPort(t)
	_, err := Connect(ctx(t), fmt.Sprintf("hoarddb://127.0.0.1:%s,127.0.0.1:%s/?insecure=true", a, b))
	var e *Error
	if !errors.Is(err, ErrConnection) || !errors.As(err, &e) || e.OutcomeUnknown {
		t.Fatalf("want CONNECTION_ERROR, got %v", err)
	}
	want := fmt.Sprintf("none of the URL's servers could be reached (127.0.0.1:%s, 127.0.0.1:%s)", a, b)
	if !strings.Contains(err.Error(), want) || strings.Count(err.Error(), "cannot connect to") != 2 {
		t.Fatalf("want the error to name both servers and why each failed, got %v", err)
	}
	// a wrong password is no reason to try the next server: it is the answer
	_, err = Connect(ctx(t), fmt.Sprintf("hoarddb://admin:wrong@127.0.0.1:%s,127.0.0.1:%s/?tls_fingerprint=%s",
		tlsServer.port, a, tlsServer.fingerprint))
	if !errors.Is(err, ErrAuthFailed) || strings.Contains(err.Error(), a) {
		t.Fatalf("want AUTH_FAILED from the first server, got %v", err)
	}
}
