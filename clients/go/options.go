package hoarddb

// options.go owns the connection options: the hoarddb:// URL, as the Python client reads it.

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultPort is the port a server listens on unless told otherwise.
const DefaultPort = 7070

// Options say where a server is and how to talk to it. Connect reads them from a URL:
//
//	hoarddb://user:password@host:7070/?tls_ca=FILE&tls_fingerprint=SHA256&insecure=true&timeout=30
//
// A URL may name several servers (the nodes of a cluster), tried in turn when one cannot be
// reached: hoarddb://h1:7070,h2:7070/. Each after the first is HOST or HOST:PORT (an IPv6
// address in brackets, the port 7070 when left out), and goes to Others.
//
// The options are the Python client's (host, port, user, password, tls_ca,
// tls_fingerprint, insecure, timeout, connect_timeout, route), plus pool_size, which is
// this client's own. The password may come from HOARDDB_PASSWORD instead of the URL.
type Options struct {
	Host     string
	Port     int
	User     string
	Password string
	// TLSCA is a PEM file of the CA (or of the server's own certificate, DATA/tls/server.crt)
	// to verify the server by; empty means the system's CAs.
	TLSCA string
	// TLSFingerprint pins the SHA-256 of the server's certificate (the server prints it at
	// start); the certificate is then checked against it instead of against CAs.
	TLSFingerprint string
	// Insecure is plaintext and no login: only against a server started with --insecure.
	Insecure bool
	// Timeout is how long a call waits for its answer once sent (60 s); past it the call
	// fails with TIMEOUT and its connection is closed, as the server fell silent. A stream
	// waits this long for each chunk.
	Timeout time.Duration
	// ConnectTimeout bounds the connection, TLS and login, each step (10 s).
	ConnectTimeout time.Duration
	// PoolSize is how many connections the client keeps for requests (4); goroutines share
	// them, pipelining their requests. Against a cluster, it keeps as many to each node.
	PoolSize int
	// Route says where a cluster's requests go: "owner" (or empty) sends each keyed request
	// to its partition's owner (router.go); "any" sends every request to the URL's node,
	// which passes on what it does not own. A single server is not affected.
	Route string
	// Others are more servers to try, in turn, when Host:Port cannot be reached (refused,
	// unreachable, or no answer within ConnectTimeout): the nodes of a cluster. They share
	// every other option.
	Others []Server
}

// Server is one more server of a URL: hoarddb://h1:7070,h2:7071/ has Host h1, Port 7070,
// and Others [{h2 7071}].
type Server struct {
	Host string
	Port int
}

// several is how a URL names more than one server, for the messages refusing a bad one.
const several = "hoarddb://h1:7070,h2:7070/"

var hostName = regexp.MustCompile(`^[\w-]+(\.[\w-]+)*\.?$`)
var bracketed = regexp.MustCompile(`^\[([^\]]*)\](?::(\d+))?$`)

// hostOK says whether host is a host name (letters, digits, '.', '-', '_') or an IP address.
func hostOK(host string) bool {
	return net.ParseIP(host) != nil || hostName.MatchString(host)
}

// splitServers takes the servers after the first out of a URL's text: the URL of the first,
// and the others, refusing one that is not HOST or HOST:PORT.
func splitServers(text string) (string, []Server, error) {
	rest := text[len("hoarddb://"):]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	head := rest[:end]
	at := strings.LastIndex(head, "@")
	hosts := head[at+1:]
	if !strings.Contains(hosts, ",") {
		return text, nil, nil
	}
	names := strings.Split(hosts, ",")
	var others []Server
	if names[0] == "" {
		return "", nil, newError(2, "the first server is missing in %q; several servers are written %s",
			redact(text), several)
	}
	for _, h := range names[1:] {
		host, port := h, ""
		if m := bracketed.FindStringSubmatch(h); m != nil {
			host, port = m[1], m[2]
			if net.ParseIP(host) == nil || !strings.Contains(host, ":") {
				host = "" // brackets are for IPv6 addresses only
			}
		} else if i := strings.LastIndex(h, ":"); i >= 0 {
			host, port = h[:i], h[i+1:]
			if port == "" {
				host = "" // HOST: without its port
			}
		}
		n := DefaultPort
		if port != "" {
			var err error
			n, err = strconv.Atoi(port)
			if err != nil || n < 1 || n > 65535 {
				host = ""
			}
		}
		if host == "" || !hostOK(host) {
			return "", nil, newError(2, "%q in %q is not HOST or HOST:PORT (a port 1-65535, an IPv6 address in "+
				"brackets); several servers are written %s", h, redact(text), several)
		}
		others = append(others, Server{Host: host, Port: n})
	}
	return text[:len("hoarddb://")] + head[:at+1] + names[0] + rest[end:], others, nil
}

// ParseURL reads a hoarddb:// URL into Options, refusing anything else with what is accepted.
func ParseURL(raw string) (*Options, error) {
	o := &Options{Host: "127.0.0.1", Port: DefaultPort, Timeout: 60 * time.Second,
		ConnectTimeout: 10 * time.Second, PoolSize: 4}
	bad := func(format string, args ...interface{}) (*Options, error) {
		return nil, newError(2, format, args...)
	}
	text := strings.TrimSpace(raw)
	if text == "" {
		return o, nil
	}
	const example = "hoarddb://user:password@host:7070/?tls_fingerprint=SHA256"
	if !strings.HasPrefix(strings.ToLower(text), "hoarddb://") {
		return bad("a hoardDB URL starts with hoarddb://, such as %s; got %q", example, redact(text))
	}
	text, others, err := splitServers(text)
	if err != nil {
		return nil, err
	}
	o.Others = others
	u, err := url.Parse(text)
	if err != nil {
		return bad("%q is not a valid URL; a hoardDB URL is such as %s (percent-encode @ : / ? # in a user "+
			"name or password)", redact(text), example)
	}
	if u.Path != "" && u.Path != "/" {
		return bad("a hoardDB URL has no path (%q): choose a database with client.Database(name)", redact(text))
	}
	if u.Fragment != "" {
		return bad("a hoardDB URL has no #fragment (%q)", redact(text))
	}
	if h := u.Hostname(); h != "" {
		o.Host = h
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return bad("the port in %q is not a number 1-65535", redact(text))
		}
		o.Port = n
	}
	if u.User != nil {
		o.User = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("the query of %q is not key=value pairs joined by &", redact(text))
	}
	for key, values := range query {
		if len(values) > 1 {
			return bad("%s is given twice in %q; give it once", key, redact(text))
		}
		v := values[0]
		if v == "" && key != "insecure" {
			return bad("%s has no value in %q; write %s=VALUE, or leave it out", key, redact(text), key)
		}
		switch key {
		case "tls_ca":
			o.TLSCA = v
		case "tls_fingerprint":
			if _, err := normalizeFingerprint(v); err != nil {
				return nil, err
			}
			o.TLSFingerprint = v
		case "insecure":
			switch strings.ToLower(v) {
			case "", "1", "true", "yes", "on":
				o.Insecure = true
			case "0", "false", "no", "off":
				o.Insecure = false
			default:
				return bad("insecure must be true or false, got %q", v)
			}
		case "timeout", "connect_timeout":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f > 0) || f > 1e9 {
				return bad("%s must be a finite number of seconds > 0, got %q", key, v)
			}
			d := time.Duration(f * float64(time.Second))
			if key == "timeout" {
				o.Timeout = d
			} else {
				o.ConnectTimeout = d
			}
		case "pool_size":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				return bad("pool_size must be a whole number 1..1000, got %q", v)
			}
			o.PoolSize = n
		case "busy_poll":
			// the Python client's knob (it polls its socket awake); nothing to do here
		case "route":
			o.Route = v
		default:
			return nil, newError(3, "unknown connection option %q; options: busy_poll, connect_timeout, "+
				"insecure, pool_size, route, timeout, tls_ca, tls_fingerprint", key)
		}
	}
	if o.User != "" && o.Password == "" {
		o.Password = os.Getenv("HOARDDB_PASSWORD")
	}
	return o, o.check()
}

func (o *Options) check() error {
	if o.Insecure && (o.TLSCA != "" || o.TLSFingerprint != "") {
		return newError(2, "insecure means no TLS: leave out tls_ca and tls_fingerprint, or insecure")
	}
	if o.Password != "" && o.User == "" {
		return newError(2, "a password without a user: give both (hoarddb://USER:PASSWORD@host/)")
	}
	if o.Route != "" && o.Route != "owner" && o.Route != "any" {
		return newError(2, "route must be one of owner, any (owner: each keyed request to its partition's owner; "+
			"any: every request to the URL's node), got %q", o.Route)
	}
	for _, s := range o.Others {
		if !hostOK(s.Host) || s.Port < 1 || s.Port > 65535 {
			return newError(2, "%s is not a host and a port 1-65535; several servers are written %s",
				net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), several)
		}
	}
	return nil
}

// address is host:port, with an IPv6 host in brackets.
func (o *Options) address() string {
	return net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
}

// candidates are the servers to try, in turn: these options, then one per server of Others.
func (o *Options) candidates() []*Options {
	first := *o
	first.Others = nil
	all := []*Options{&first}
	for _, s := range o.Others {
		other := first
		other.Host, other.Port = s.Host, s.Port
		all = append(all, &other)
	}
	return all
}

// tlsConfig is the client's TLS configuration (nil when insecure): verify by a CA, or by a pin.
func (o *Options) tlsConfig() (*tls.Config, error) {
	if o.Insecure {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.Host}
	if o.TLSFingerprint != "" {
		want, err := normalizeFingerprint(o.TLSFingerprint)
		if err != nil {
			return nil, err
		}
		// A pin replaces the chain and the host name: the certificate is the one we know.
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return newError(29, "the server at %s presented no certificate", o.address())
			}
			sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if hex.EncodeToString(sum[:]) != want {
				return newError(29, "the server at %s presented a certificate with SHA-256 fingerprint %s, not "+
					"the pinned %s; refusing to talk to it. If the server's certificate was replaced on purpose, "+
					"pin its new fingerprint (the server prints it at start)", o.address(), colons(sum[:]),
					o.TLSFingerprint)
			}
			return nil
		}
		return c, nil
	}
	if o.TLSCA != "" {
		pem, err := os.ReadFile(o.TLSCA)
		pool := x509.NewCertPool()
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			return nil, newError(2, "cannot read the CA file %q: tls_ca must be a PEM file of the CA that signed "+
				"the server's certificate, or a copy of that certificate (the server's DATA/tls/server.crt)", o.TLSCA)
		}
		c.RootCAs = pool
	}
	return c, nil
}

// normalizeFingerprint is a pinned fingerprint in any usual spelling as 64 lowercase hex digits.
func normalizeFingerprint(text string) (string, error) {
	t := strings.ToLower(strings.TrimSpace(text))
	for _, prefix := range []string{"sha256:", "sha256 ", "sha-256:", "sha256="} {
		t = strings.TrimSpace(strings.TrimPrefix(t, prefix))
	}
	t = strings.NewReplacer(":", "", " ", "").Replace(t)
	if _, err := hex.DecodeString(t); err != nil || len(t) != 64 {
		return "", newError(2, "%q is not a SHA-256 fingerprint (64 hex digits, colons allowed)", text)
	}
	return t, nil
}

func colons(sum []byte) string {
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}

// redact is a URL with its password replaced by ***, to show in a message.
func redact(text string) string {
	head, rest, found := strings.Cut(text, "//")
	at := strings.LastIndex(rest, "@")
	if !found || at < 0 {
		return text
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if hasPassword {
		user += ":***"
	}
	return head + "//" + user + rest[at:]
}
