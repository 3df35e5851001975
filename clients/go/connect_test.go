package hoarddb

// connect_test.go: TLS (pinned, by CA, refused), SCRAM logins right and wrong, insecure, URLs.

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestConnectPinnedFingerprint(t *testing.T) {
	c := admin(t)
	who, err := c.Whoami(ctx(t))
	if err != nil || who["user"] != "admin" {
		t.Fatalf("whoami: %v %v", who, err)
	}
	info, err := c.ServerInfo(ctx(t))
	if err != nil || info.Lookup("protocol").AsInt64() != 1 {
		t.Fatalf("hello: %v %v", info, err)
	}
}

func TestConnectByCA(t *testing.T) {
	ca := filepath.Join(tlsServer.data, "tls", "server.crt")
	c := connect(t, tlsServer.url("admin:s3cret%20pass", "tls_ca="+ca))
	if _, err := c.Databases(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestWrongFingerprintIsRefused(t *testing.T) {
	wrong := strings.Repeat("AB:", 31) + "AB"
	_, err := Connect(ctx(t), tlsServer.url("admin:s3cret%20pass", "tls_fingerprint="+wrong))
	if !errors.Is(err, ErrConnection) || !strings.Contains(err.Error(), "not the pinned") {
		t.Fatalf("want CONNECTION_ERROR naming the pin, got %v", err)
	}
}

func TestUnknownCertificateIsRefused(t *testing.T) {
	_, err := Connect(ctx(t), tlsServer.url("admin:s3cret%20pass", ""))
	if !errors.Is(err, ErrConnection) || !strings.Contains(err.Error(), "TLS handshake") {
		t.Fatalf("a self-signed certificate against the system's CAs: want CONNECTION_ERROR, got %v", err)
	}
}

func TestWrongPassword(t *testing.T) {
	_, err := Connect(ctx(t), tlsServer.url("admin:wrong", "tls_fingerprint="+tlsServer.fingerprint))
	var e *Error
	if !errors.Is(err, ErrAuthFailed) || !errors.As(err, &e) || e.Code != 27 || e.CodeName != "AUTH_FAILED" {
		t.Fatalf("want AUTH_FAILED, got %v", err)
	}
	_, err = Connect(ctx(t), tlsServer.url("nobody:wrong", "tls_fingerprint="+tlsServer.fingerprint))
	if !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("unknown user: want AUTH_FAILED, got %v", err)
	}
	_, err = Connect(ctx(t), tlsServer.url("", "tls_fingerprint="+tlsServer.fingerprint))
	if !errors.Is(err, ErrAuthFailed) || !strings.Contains(err.Error(), "requires a login") {
		t.Fatalf("no user: want AUTH_FAILED saying a login is needed, got %v", err)
	}
}

func TestReadOnlyUserIsRefusedWrites(t *testing.T) {
	a := admin(t)
	b := fresh(t, a, map[string]interface{}{"type": "fifo"})
	r := connect(t, tlsServer.url("reader:"+readerPassword, "tls_fingerprint="+tlsServer.fingerprint))
	rb := r.Database("app").Bucket(b.Name)
	if _, err := rb.Length(ctx(t)); err != nil {
		t.Fatalf("read: %v", err)
	}
	err := rb.Push(ctx(t), map[string]int{"n": 1})
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("want UNAUTHORIZED, got %v", err)
	}
}

func TestInsecure(t *testing.T) {
	c := connect(t, insecureServer.url("", "insecure=true"))
	if _, err := c.Databases(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// TLS against a plaintext server, and plaintext against a TLS one, fail with advice
	if _, err := Connect(ctx(t), insecureServer.url("", "tls_fingerprint="+tlsServer.fingerprint)); !errors.Is(err, ErrConnection) {
		t.Fatalf("TLS to an insecure server: %v", err)
	}
	if _, err := Connect(ctx(t), tlsServer.url("", "insecure=true")); !errors.Is(err, ErrConnection) {
		t.Fatalf("plaintext to a TLS server: %v", err)
	}
}

func TestURLs(t *testing.T) {
	o, err := ParseURL("hoarddb://ann:p%40ss@db.example:7080/?tls_fingerprint=sha256:" + strings.Repeat("ab", 32) +
		"&timeout=2.5&pool_size=8")
	if err != nil || o.Host != "db.example" || o.Port != 7080 || o.User != "ann" || o.Password != "p@ss" ||
		o.PoolSize != 8 || o.Timeout.Seconds() != 2.5 {
		t.Fatalf("%+v %v", o, err)
	}
	for url, code := range map[string]*Error{
		"http://x/":                           ErrBadValue,
		"hoarddb://x/?colour=red":             ErrUnknownOption,
		"hoarddb://x/?insecure=maybe":         ErrBadValue,
		"hoarddb://x/?tls_fingerprint=abc":    ErrBadValue,
		"hoarddb://x/app":                     ErrBadValue,
		"hoarddb://x:99999/":                  ErrBadValue,
		"hoarddb://x/?insecure=true&tls_ca=f": ErrBadValue,
		"hoarddb://x/?route=nearest":          ErrBadValue,
	} {
		if _, err := ParseURL(url); !errors.Is(err, code) {
			t.Errorf("%s: want %s, got %v", url, code.CodeName, err)
		}
	}
	if _, err := ParseURL("hoarddb://x/?route=any"); err != nil { // a URL shared with Python programs
		t.Errorf("route=any: %v", err)
	}
	if _, err := ParseURL("hoarddb://ann:secret@x:notaport/"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("a refused URL must not show its password: %v", err)
	}
}

func TestUsers(t *testing.T) {
	c := admin(t)
	_ = c.DropUser(ctx(t), "gopher")
	if err := c.CreateUser(ctx(t), "gopher", "burrow", "readWrite:app"); err != nil {
		t.Fatal(err)
	}
	users, err := c.ListUsers(ctx(t))
	found := false
	for _, u := range users {
		found = found || u.Name == "gopher" && len(u.Roles) == 1 && u.Roles[0] == "readWrite:app"
	}
	if err != nil || !found {
		t.Fatalf("list users: %v %v", users, err)
	}
	g := connect(t, tlsServer.url("gopher:burrow", "tls_fingerprint="+tlsServer.fingerprint))
	b := fresh(t, c, map[string]string{"type": "fifo"})
	if err := g.Database("app").Bucket(b.Name).Push(ctx(t), map[string]int{"n": 1}); err != nil {
		t.Fatalf("the new user's write: %v", err)
	}
	if err := c.UpdateUser(ctx(t), "gopher", "tunnel", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Connect(ctx(t), tlsServer.url("gopher:burrow", "tls_fingerprint="+tlsServer.fingerprint)); !errors.Is(err, ErrAuthFailed) {
		t.Fatalf("the old password: %v", err)
	}
	g = connect(t, tlsServer.url("gopher:tunnel", "tls_fingerprint="+tlsServer.fingerprint))
	if _, err := g.CreateDatabase(ctx(t), "gophers"); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("readWrite creating a database: %v", err)
	}
	if err := c.DropUser(ctx(t), "gopher"); err != nil {
		t.Fatal(err)
	}
	if err := c.DropUser(ctx(t), "gopher"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("dropping a dropped user: %v", err)
	}
}
