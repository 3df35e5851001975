package hoarddb

// table_test.go holds the client to the server's command table and error codes, and checks
// that every verb of the table is a method here.

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
)

type pyTable struct {
	Operations map[string]struct {
		Scope    string   `json:"scope"`
		Write    bool     `json:"write"`
		Retry    bool     `json:"retry"`
		Streams  bool     `json:"streams"`
		Upload   string   `json:"upload"`
		Types    []string `json:"types"`
		KeyParam string   `json:"key_param"`
		KeyKind  string   `json:"key_kind"`
		MakesKey bool     `json:"makes_key"`
		Cursor   bool     `json:"cursor"`
		Pushes   bool     `json:"pushes"`
		Turns    bool     `json:"turns"`
	} `json:"operations"`
	FieldVerbs map[string][]string `json:"field_verbs"`
	Errors     map[string]string   `json:"errors"`
}

func serverTable(t *testing.T) pyTable {
	out, err := python("testdata/table.py").Output()
	if err != nil {
		t.Fatalf("reading the Python command table: %v", err)
	}
	var tab pyTable
	if err := json.Unmarshal(out, &tab); err != nil {
		t.Fatal(err)
	}
	return tab
}

func TestTableMatchesTheServers(t *testing.T) {
	tab := serverTable(t)
	const regenerate = "; regenerate: python testdata/table.py --go | gofmt > table.go"
	for name, op := range tab.Operations {
		got, ok := operations[name]
		want := operation{scope: op.Scope, write: op.Write, retry: op.Retry, streams: op.Streams, upload: op.Upload,
			types: op.Types, keyParam: op.KeyParam, keyKind: op.KeyKind, makesKey: op.MakesKey, cursor: op.Cursor,
			pushes: op.Pushes, turns: op.Turns}
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("operation %s: table.go has %+v, the server %+v%s", name, got, want, regenerate)
		}
	}
	if len(operations) != len(tab.Operations) {
		t.Errorf("table.go has %d operations, the server %d%s", len(operations), len(tab.Operations), regenerate)
	}
	if !reflect.DeepEqual(fieldVerbs, tab.FieldVerbs) {
		t.Errorf("field verbs differ%s", regenerate)
	}
	if len(codeNames) != len(tab.Errors) {
		t.Errorf("table.go has %d error codes, the server %d%s", len(codeNames), len(tab.Errors), regenerate)
	}
	for code, name := range codeNames {
		if tab.Errors[itoa(code)] != name {
			t.Errorf("error %d: %s here, %s on the server%s", code, name, tab.Errors[itoa(code)], regenerate)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestEveryCodeHasItsValue(t *testing.T) {
	seen := map[int]bool{}
	for _, e := range sentinels {
		if codeNames[e.Code] != e.CodeName {
			t.Errorf("Err value %s has code %d, which the server names %s", e.CodeName, e.Code, codeNames[e.Code])
		}
		seen[e.Code] = true
	}
	for code, name := range codeNames {
		if !seen[code] {
			t.Errorf("error %d %s has no Err value in errors.go", code, name)
		}
	}
}

// goName is a verb's method name: batch_push -> BatchPush.
func goName(verb string) string {
	parts := strings.Split(verb, "_")
	for i, p := range parts {
		parts[i] = strings.ToUpper(p[:1]) + p[1:]
	}
	return strings.Join(parts, "")
}

// Some verbs are two methods in Go, by what they take or give (a blob's bytes, a count).
var alsoAs = map[string][]string{"put": {"PutBlob"}, "pop": {"PopN"}, "peek": {"PeekN"}, "stream": {"Open"}}

func TestEveryVerbIsAMethod(t *testing.T) {
	bucket := reflect.TypeOf(&Bucket{})
	field := reflect.TypeOf(&Field{})
	var names []string
	for name, op := range operations {
		if op.scope == "bucket" && len(op.types) > 0 {
			names = append(names, name)
			for _, m := range append([]string{goName(name)}, alsoAs[name]...) {
				if _, ok := bucket.MethodByName(m); !ok {
					t.Errorf("bucket verb %s: no method Bucket.%s", name, m)
				}
			}
		}
	}
	for name, types := range fieldVerbs {
		for _, m := range append([]string{goName(name)}, alsoAs[name]...) {
			if m == "PutBlob" && !contains(types, "blob") {
				continue
			}
			if _, ok := field.MethodByName(m); !ok {
				t.Errorf("store-field verb %s: no method Field.%s", name, m)
			}
		}
	}
	sort.Strings(names)
	if len(names) < 20 {
		t.Fatalf("the table holds too few bucket verbs: %v", names)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
