package hoarddb

// server_test.go starts real hoardDB servers for the tests: the Python package's
// `hoarddb server`, found through HOARDDB_PYTHON (the interpreter, default python3) and
// HOARDDB_SRC (the repository holding the hoarddb package, default ../..).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	adminPassword  = "s3cret pass"
	readerPassword = "reader-pw"
)

var (
	tlsServer      *testServer // TLS and authentication on, users admin and reader
	insecureServer *testServer // --insecure
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hoarddb-go-test-")
	if err != nil {
		panic(err)
	}
	code := func() int {
		tlsServer, err = startServer(filepath.Join(dir, "tls"), false)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer tlsServer.stop()
		insecureServer, err = startServer(filepath.Join(dir, "insecure"), true)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer insecureServer.stop()
		os.Setenv("HOARDDB_TEST_URL", adminURL()) // for the example, a package of its own
		return m.Run()
	}()
	os.RemoveAll(dir)
	os.Exit(code)
}

// python is the command that runs the Python package, with its source on PYTHONPATH.
func python(args ...string) *exec.Cmd {
	interpreter := os.Getenv("HOARDDB_PYTHON")
	if interpreter == "" {
		interpreter = "python3"
	}
	src := os.Getenv("HOARDDB_SRC")
	if src == "" {
		src = "../.."
	}
	src, _ = filepath.Abs(src)
	cmd := exec.Command(interpreter, args...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+src, "PYTHONDONTWRITEBYTECODE=1",
		"HOARDDB_AUTH_FAILURE_DELAY=0.1")
	return cmd
}

type testServer struct {
	data        string
	insecure    bool
	port        string
	fingerprint string
	cmd         *exec.Cmd
	exited      chan struct{}
	log         *os.File
}

var listening = regexp.MustCompile(`listening on 127\.0\.0\.1:(\d+).*`)
var fingerprintRe = regexp.MustCompile(`fingerprint ([0-9A-F:]{95})`)

func startServer(data string, insecure bool) (*testServer, error) {
	s := &testServer{data: data, insecure: insecure, port: "0"}
	if !insecure {
		for _, u := range [][3]string{{"admin", "admin", adminPassword}, {"reader", "read:app", readerPassword}} {
			cmd := python("-m", "hoarddb.cli", "user", "add", "--data", data, "--role", u[1], "--iterations", "4096",
				"--password-stdin", u[0])
			cmd.Stdin = strings.NewReader(u[2] + "\n")
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("adding user %s: %v\n%s", u[0], err, out)
			}
		}
	}
	return s, s.start()
}

func (s *testServer) start() error {
	args := []string{"-m", "hoarddb.cli", "server", "--data", s.data, "--port", s.port, "--metrics-port", "-1"}
	if s.insecure {
		args = append(args, "--insecure")
	}
	s.cmd = python(args...)
	logPath := s.data + ".log"
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	s.log = log
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("starting the server (%s): %v; set HOARDDB_PYTHON to a Python with hoardDB's "+
			"dependencies, and HOARDDB_SRC to the repository", s.cmd.Path, err)
	}
	exited := make(chan struct{})
	s.exited = exited
	go func() { _ = s.cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		text, _ := os.ReadFile(logPath)
		if m := listening.FindStringSubmatch(string(text)); m != nil {
			s.port = m[1]
			if f := fingerprintRe.FindStringSubmatch(m[0]); f != nil {
				s.fingerprint = f[1]
			}
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("the server exited:\n%s", text)
		case <-time.After(50 * time.Millisecond):
		}
	}
	s.stop()
	return fmt.Errorf("the server did not start within 30 s")
}

func (s *testServer) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.log.Close()
	s.cmd = nil
}

// restart stops the server and starts it again on the same port and data.
func (s *testServer) restart() error {
	s.stop()
	return s.start()
}

func (s *testServer) url(userinfo string, query string) string {
	if userinfo != "" {
		userinfo += "@"
	}
	return fmt.Sprintf("hoarddb://%s127.0.0.1:%s/?%s", userinfo, s.port, query)
}

// adminURL is the TLS server's URL for admin, pinned to its certificate.
func adminURL() string {
	return tlsServer.url("admin:s3cret%20pass", "tls_fingerprint="+tlsServer.fingerprint)
}

func connect(t testing.TB, url string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func admin(t testing.TB) *Client { return connect(t, adminURL()) }

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

var buckets int

// fresh is a bucket of a new name, created with options (its type first).
func fresh(t testing.TB, c *Client, options interface{}) *Bucket {
	t.Helper()
	name := regexp.MustCompile(`[^A-Za-z0-9_-]`).ReplaceAllString(t.Name(), "_")
	if len(name) > 50 {
		name = name[len(name)-50:]
	}
	buckets++
	name = fmt.Sprintf("B%d_%s", buckets, strings.Trim(name, "_-"))
	db := c.Database("app")
	_, _ = db.DropBucket(ctx(t), name)
	b, err := db.CreateBucket(ctx(t), name, options)
	if err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	return b
}
