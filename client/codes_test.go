package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestCodesMatchJS: the Go SDK's Code* constants, the JavaScript SDK's
// Codes (clients/js/index.js) and its TypeScript declaration
// (clients/js/index.d.ts) name the same codes with the same values
// (CodeOwnerMoved is Codes.OWNER_MOVED), so neither SDK can gain or lose
// a code alone.
func TestCodesMatchJS(t *testing.T) {
	goCodes := map[string]string{} // JS name -> value
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
				continue
			}
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			v, _ := strconv.Unquote(lit.Value)
			goCodes[jsName(strings.TrimPrefix(name.Name, "Code"))] = v
		}
		return true
	})
	if len(goCodes) < 13 {
		t.Fatalf("found %d Code* constants in errors.go: %v", len(goCodes), goCodes)
	}
	for file, re := range map[string]*regexp.Regexp{
		"../clients/js/index.js":   regexp.MustCompile(`(?s)export const Codes = Object\.freeze\(\{(.*?)\}\)`),
		"../clients/js/index.d.ts": regexp.MustCompile(`(?s)export declare const Codes: Readonly<\{(.*?)\}>`),
	} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := re.FindSubmatch(src)
		if m == nil {
			t.Fatalf("%s: no Codes block", file)
		}
		js := map[string]string{}
		for _, e := range regexp.MustCompile(`([A-Z_]+): '([a-z_]+)'`).FindAllSubmatch(m[1], -1) {
			js[string(e[1])] = string(e[2])
		}
		for k, v := range goCodes {
			if js[k] != v {
				t.Errorf("%s: Codes.%s is %q, Go's is %q", file, k, js[k], v)
			}
		}
		for k, v := range js {
			if _, ok := goCodes[k]; !ok {
				t.Errorf("%s: Codes.%s (%q) has no Go constant", file, k, v)
			}
		}
	}
}

// jsName turns OwnerMoved into OWNER_MOVED.
func jsName(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}
