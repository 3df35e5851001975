package hoarddb

// scram.go owns the client's side of SCRAM-SHA-256 (RFC 5802 with RFC 7677's hash), without I/O.

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/text/unicode/norm"
)

const minIterations = 4096

// scram is one exchange: first(), final(serverFirst), verify(serverFinal).
type scram struct {
	user, password string
	nonce          string
	bare           string
	signature      []byte
	cache          *saltCache
}

func newScram(user, password string, cache *saltCache) *scram {
	raw := make([]byte, 18)
	_, _ = rand.Read(raw)
	nonce := base64.StdEncoding.EncodeToString(raw)
	name := strings.NewReplacer("=", "=3D", ",", "=2C").Replace(norm.NFKC.String(user))
	return &scram{user: user, password: password, nonce: nonce, bare: "n=" + name + ",r=" + nonce, cache: cache}
}

func (s *scram) first() string { return "n,," + s.bare }

func (s *scram) final(serverFirst string) (string, error) {
	f := scramFields(serverFirst)
	nonce, iterations := f["r"], f["i"]
	salt, err := base64.StdEncoding.DecodeString(f["s"])
	if err != nil {
		return "", newError(31, "SCRAM: the server's salt is not base64")
	}
	if !strings.HasPrefix(nonce, s.nonce) || len(nonce) == len(s.nonce) {
		return "", newError(27, "the server's SCRAM nonce does not extend ours; is this a hoardDB server?")
	}
	n, err := strconv.Atoi(iterations)
	if err != nil || n < minIterations {
		return "", newError(27, "the server asked for %q SCRAM iterations, fewer than %d", iterations, minIterations)
	}
	salted := s.cache.salted(s.password, salt, n)
	withoutProof := "c=biws,r=" + nonce
	authMessage := []byte(s.bare + "," + serverFirst + "," + withoutProof)
	clientKey := hmacSHA256(salted, []byte("Client Key"))
	storedKey := sha256.Sum256(clientKey)
	proof := hmacSHA256(storedKey[:], authMessage)
	for i := range proof {
		proof[i] ^= clientKey[i]
	}
	s.signature = hmacSHA256(hmacSHA256(salted, []byte("Server Key")), authMessage)
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof), nil
}

func (s *scram) verify(serverFinal string) error {
	got, err := base64.StdEncoding.DecodeString(scramFields(serverFinal)["v"])
	if err != nil || !hmac.Equal(got, s.signature) {
		return newError(27, "the server's SCRAM signature is wrong: it does not hold this user's keys")
	}
	return nil
}

func scramFields(message string) map[string]string {
	out := map[string]string{}
	for _, part := range strings.Split(message, ",") {
		if len(part) >= 2 && part[1] == '=' {
			if _, seen := out[part[:1]]; !seen {
				out[part[:1]] = part[2:]
			}
		}
	}
	return out
}

func hmacSHA256(key, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(data)
	return m.Sum(nil)
}

// saltCache keeps SaltedPassword per (password, salt, iterations): PBKDF2 is the slow step,
// and every new connection of a client logs in again.
type saltCache struct {
	mu    sync.Mutex
	key   string
	value []byte
}

func (c *saltCache) salted(password string, salt []byte, iterations int) []byte {
	key := string(salt) + "\x00" + strconv.Itoa(iterations) + "\x00" + password
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key != key {
		c.value = pbkdf2SHA256([]byte(norm.NFKC.String(password)), salt, iterations)
		c.key = key
	}
	return c.value
}

// pbkdf2SHA256 is PBKDF2-HMAC-SHA-256 with one block of output (32 bytes, what SCRAM needs).
func pbkdf2SHA256(password, salt []byte, iterations int) []byte {
	m := hmac.New(sha256.New, password)
	m.Write(salt)
	m.Write([]byte{0, 0, 0, 1})
	u := m.Sum(nil)
	out := append([]byte(nil), u...)
	for i := 1; i < iterations; i++ {
		m.Reset()
		m.Write(u)
		u = m.Sum(u[:0])
		for j := range out {
			out[j] ^= u[j]
		}
	}
	return out
}
