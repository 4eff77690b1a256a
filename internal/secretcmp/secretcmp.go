// Package secretcmp finds secrets compared in variable time. A MAC, token
// or secret compared with ==, !=, bytes.Equal or a string comparison
// returns as soon as the first byte differs, which tells an attacker who
// can time the answer how much of a forgery was right (the relay's
// handshake, the gateway's secret, the broker's tokens). Such values must
// be compared with hmac.Equal or subtle.ConstantTimeCompare only.
//
// The check is syntactic (go/ast, no type information), so a secret is
// recognised by its name: an identifier, field, method or function whose
// name holds one of the words in secretWords (camelCase and underscores
// split; case-insensitive), such as gwSecret, wantMAC, Token() or
// mac(secret, ...). A comparison is reported when one side is such a value
// and neither side is public (publicOperand): comparing a secret with a
// literal, nil, a length (len, cap) or a constant of its package leaks
// nothing the source does not already say. Names that hold a secret word
// but name a size (macLen, tokenCount) are not secrets (sizeWords).
// The tree's test (TestNoSecretComparedInVariableTime) runs it over every
// non-test .go file of the module.
package secretcmp

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"unicode"
)

// secretWords are the words that make a name a secret's.
var secretWords = map[string]bool{
	"mac": true, "macs": true, "hmac": true,
	"secret": true, "secrets": true,
	"token": true, "tokens": true,
	"signature": true, "signatures": true,
	"proof": true, "proofs": true,
	"digest": true, "digests": true,
	"password": true, "passwords": true,
}

// sizeWords, as a name's last word, make it a size rather than the value
// (macLen, tokenCount).
var sizeWords = map[string]bool{"len": true, "length": true, "size": true, "count": true, "n": true}

// comparers are the variable-time comparison functions, by package and
// name (as imported under their own names).
var comparers = map[string]bool{
	"bytes.Equal": true, "bytes.Compare": true, "bytes.EqualFold": true,
	"bytes.HasPrefix": true, "bytes.HasSuffix": true,
	"strings.Compare": true, "strings.EqualFold": true,
	"strings.HasPrefix": true, "strings.HasSuffix": true,
	"slices.Equal": true, "slices.Compare": true, "reflect.DeepEqual": true,
}

// Finding is one secret compared in variable time.
type Finding struct {
	Pos    token.Position
	Secret string // the secret-named operand
	How    string // "==", "!=" or the function
}

func (f Finding) String() string {
	return fmt.Sprintf("%s: %s compared with %s; use hmac.Equal or subtle.ConstantTimeCompare", f.Pos, f.Secret, f.How)
}

// CheckFiles parses the files (one package's, so that its constants are
// known) and reports every secret they compare in variable time.
func CheckFiles(paths []string) ([]Finding, error) {
	fset := token.NewFileSet()
	var files []*ast.File
	consts := map[string]bool{}
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					for _, n := range s.(*ast.ValueSpec).Names {
						consts[n.Name] = true
					}
				}
			}
		}
	}
	var out []Finding
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch e := n.(type) {
			case *ast.BinaryExpr:
				if e.Op == token.EQL || e.Op == token.NEQ {
					if s, ok := compared(consts, e.X, e.Y); ok {
						out = append(out, Finding{fset.Position(e.OpPos), s, e.Op.String()})
					}
				}
			case *ast.CallExpr:
				if name := qualified(e.Fun); comparers[name] && len(e.Args) >= 2 {
					if s, ok := compared(consts, e.Args...); ok {
						out = append(out, Finding{fset.Position(e.Pos()), s, name})
					}
				}
			}
			return true
		})
	}
	return out, nil
}

// compared returns the secret among operands when one is a secret and none
// is public.
func compared(consts map[string]bool, operands ...ast.Expr) (string, bool) {
	secret := ""
	for _, o := range operands {
		if publicOperand(consts, o) {
			return "", false
		}
		if s := secretName(o); s != "" && secret == "" {
			secret = s
		}
	}
	return secret, secret != ""
}

// publicOperand reports whether e is known to the source: a literal, nil,
// true or false, a length, or a constant of the package.
func publicOperand(consts map[string]bool, e ast.Expr) bool {
	switch x := ast.Unparen(e).(type) {
	case *ast.BasicLit:
		return true
	case *ast.Ident:
		return x.Name == "nil" || x.Name == "true" || x.Name == "false" || consts[x.Name]
	case *ast.CallExpr:
		if id, ok := x.Fun.(*ast.Ident); ok && (id.Name == "len" || id.Name == "cap") {
			return true
		}
		if c, ok := conversion(x); ok {
			return publicOperand(consts, c)
		}
	}
	return false
}

// secretName returns the name that makes e a secret, or "".
func secretName(e ast.Expr) string {
	switch x := ast.Unparen(e).(type) {
	case *ast.Ident:
		return nameIfSecret(x.Name)
	case *ast.SelectorExpr:
		return nameIfSecret(x.Sel.Name)
	case *ast.IndexExpr:
		return secretName(x.X)
	case *ast.SliceExpr:
		return secretName(x.X)
	case *ast.StarExpr:
		return secretName(x.X)
	case *ast.UnaryExpr:
		return secretName(x.X)
	case *ast.CallExpr:
		if c, ok := conversion(x); ok {
			return secretName(c)
		}
		switch f := x.Fun.(type) {
		case *ast.Ident: // mac(secret, ...)
			return nameIfSecret(f.Name)
		case *ast.SelectorExpr: // a.Token()
			return nameIfSecret(f.Sel.Name)
		}
	}
	return ""
}

// conversion returns the operand of string(x) or []byte(x).
func conversion(c *ast.CallExpr) (ast.Expr, bool) {
	if len(c.Args) != 1 {
		return nil, false
	}
	switch f := c.Fun.(type) {
	case *ast.Ident:
		return c.Args[0], f.Name == "string"
	case *ast.ArrayType:
		id, ok := f.Elt.(*ast.Ident)
		return c.Args[0], ok && f.Len == nil && (id.Name == "byte" || id.Name == "rune")
	}
	return nil, false
}

// qualified is "pkg.Name" for a call of pkg.Name, else "".
func qualified(fun ast.Expr) string {
	if s, ok := fun.(*ast.SelectorExpr); ok {
		if p, ok := s.X.(*ast.Ident); ok {
			return p.Name + "." + s.Sel.Name
		}
	}
	return ""
}

// nameIfSecret returns name when one of its words is a secret word and its
// last word is not a size.
func nameIfSecret(name string) string {
	ws := words(name)
	if len(ws) == 0 || sizeWords[ws[len(ws)-1]] {
		return ""
	}
	for _, w := range ws {
		if secretWords[w] {
			return name
		}
	}
	return ""
}

// words splits an identifier at underscores and at case changes
// (gwSecret: gw, secret; wantMAC: want, mac; HMACKey: hmac, key), lower
// case.
func words(name string) []string {
	var out []string
	rs := []rune(name)
	start := 0
	flush := func(end int) {
		if end > start {
			out = append(out, strings.ToLower(string(rs[start:end])))
		}
		start = end
	}
	for i, r := range rs {
		switch {
		case r == '_':
			flush(i)
			start = i + 1
		case i > start && unicode.IsUpper(r):
			prev := rs[i-1]
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				flush(i)
			}
		}
	}
	flush(len(rs))
	return out
}
