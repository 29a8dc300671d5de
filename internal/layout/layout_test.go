package layout_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the import path of the repository's module.
const module = "github.com/millrace/millrace"

// clients maps each broker client module (an import path prefix) to the folder, relative to
// the module root, that alone may import it: the broker's adapter folder. A Watermill
// broker package counts as its broker's client.
var clients = []struct{ prefix, owner string }{
	{"github.com/IBM/sarama", "adapters/kafka"},
	{"github.com/twmb/franz-go", "adapters/kafka"},
	{"github.com/ThreeDotsLabs/watermill-kafka", "adapters/kafka"},
	{"github.com/redis/go-redis", "adapters/redisstream"},
	{"github.com/ThreeDotsLabs/watermill-redisstream", "adapters/redisstream"},
	{"github.com/rabbitmq/amqp091-go", "adapters/amqp"},
	{"github.com/ThreeDotsLabs/watermill-amqp", "adapters/amqp"},
	{"github.com/aws/aws-sdk-go-v2", "adapters/sqs"},
	{"github.com/aws/smithy-go", "adapters/sqs"},
	{"github.com/ThreeDotsLabs/watermill-aws", "adapters/sqs"},
	{"github.com/nats-io/nats.go", "adapters/nats"},
	{"github.com/ThreeDotsLabs/watermill-nats", "adapters/nats"},
}

// allowed are the folders (with everything under them) that may import a client module
// besides its owner, and why.
var allowed = map[string][]string{
	// The idempotency store keeps its keys in Redis; redisguard guards its go-redis client;
	// redisretry classifies go-redis's failures for both Redis users.
	"github.com/redis/go-redis": {"idempotency", "internal/redisguard", "internal/redisretry"},
}

// pgx is the table store's client. Non-test code imports it only in the table store and the
// idempotency store; tests anywhere may use it to reach the test database.
const pgx = "github.com/jackc/pgx"

// pgxOwners may import pgx in non-test code.
var pgxOwners = []string{"deadletter/pgstore", "idempotency"}

// exempt folders are not checked: examples are users' programs (they import what a user
// would; TestLayout logs what), tools are the test brokers (kfake, fauxqs) and run what they
// run.
var exempt = []string{"examples", "tools"}

// brokerNames may not appear in the name of a file or folder under cmd/millrace: the CLI
// names no broker (a blank import per adapter registers it).
var brokerNames = []string{"amqp", "kafka", "redis", "sqs", "rabbit", "nats"}

// knownViolations are the violations the tree still has (none now), each with what it takes to
// remove it. TestLayout fails on any violation not listed here, and on a listed one that is gone (so
// that this list only shrinks: delete the entry).
var knownViolations = map[string]string{}

// pkg is what TestLayout reads of `go list -json`.
type pkg struct {
	ImportPath, Dir                                              string
	GoFiles, CgoFiles, TestGoFiles, XTestGoFiles, IgnoredGoFiles []string
}

// TestLayout enforces issue 14's rule, "everything broker-specific lives under
// adapters/<broker>/": no Go file of the module (tests and files of other build tags
// included) imports a broker's client library outside that broker's adapter folder, save the
// exceptions above; no file under cmd/millrace is named after a broker; cmd/millrace imports
// broker adapters only blank, to register them.
func TestLayout(t *testing.T) {
	root := moduleRoot(t)
	var got []string
	for _, p := range listPackages(t, root) {
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		if under(rel, exempt...) {
			if strings.HasPrefix(rel, "examples/") {
				t.Logf("exempt %s imports %s", rel, strings.Join(brokerImports(t, p), ", "))
			}
			continue
		}
		test := map[string]bool{}
		for _, f := range slices.Concat(p.TestGoFiles, p.XTestGoFiles) {
			test[f] = true
		}
		for _, f := range slices.Concat(p.GoFiles, p.CgoFiles, p.TestGoFiles, p.XTestGoFiles, p.IgnoredGoFiles) {
			if !strings.HasSuffix(f, ".go") {
				continue
			}
			isTest := test[f] || strings.HasSuffix(f, "_test.go")
			for _, im := range imports(t, filepath.Join(p.Dir, f)) {
				if v := check(rel, isTest, im); v != "" {
					got = append(got, rel+"/"+f+" "+v)
				}
			}
		}
	}
	got = append(got, brokerNamedFiles(t, root, "cmd/millrace")...)

	var unknown []string
	for _, v := range got {
		if _, ok := knownViolations[v]; !ok {
			unknown = append(unknown, v)
		}
	}
	for v, fix := range knownViolations {
		if slices.Contains(got, v) {
			t.Logf("known violation, still to remove: %s (%s)", v, fix)
		} else {
			t.Errorf("known violation no longer occurs, delete it from knownViolations in internal/layout/layout_test.go: %s", v)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		t.Errorf("%d layout violations (issue 14: everything broker-specific lives under adapters/<broker>/; "+
			"a broker's client library is imported only there, and cmd/millrace names no broker):\n  %s\n"+
			"Move the code into the broker's adapter folder (tests of the CLI: adapters/<broker>/cli_test.go with internal/clitest).",
			len(unknown), strings.Join(unknown, "\n  "))
	}
}

// check returns the violation of the file at dir rel (a test file when isTest) importing
// path im as name, or "".
func check(rel string, isTest bool, im imported) string {
	for _, c := range clients {
		if !hasPathPrefix(im.path, c.prefix) {
			continue
		}
		if under(rel, c.owner) || under(rel, allowed[c.prefix]...) {
			return ""
		}
		return "imports " + im.path + " (" + c.owner + "'s broker client)"
	}
	if hasPathPrefix(im.path, pgx) && !isTest && !under(rel, pgxOwners...) {
		return "imports " + im.path + " (the table store's client, outside " + strings.Join(pgxOwners, " and ") + ")"
	}
	if a, ok := strings.CutPrefix(im.path, module+"/adapters/"); ok {
		broker, _, _ := strings.Cut(a, "/")
		switch {
		case broker == "memory" || under(rel, "adapters/"+broker):
		case under(rel, "cmd/millrace"):
			if im.name != "_" {
				return "imports " + im.path + " without a blank name"
			}
		case under(rel, "adapters"):
			// A broker's adapter folder depending on another broker's adapter is a broker's
			// knowledge outside its folder.
			return "imports " + im.path + " (another broker's adapter)"
		case under(rel, "deadletter"):
			// deadletter keeps the broker-neutral record, store, replay rules and table store.
			return "imports " + im.path + " (a broker's adapter)"
		}
	}
	return ""
}

// brokerNamedFiles returns a violation for each file or folder under dir (relative to root)
// whose name contains a broker's name.
func brokerNamedFiles(t *testing.T, root, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := strings.ToLower(d.Name())
		for _, b := range brokerNames {
			if strings.Contains(name, b) {
				rel, _ := filepath.Rel(root, path)
				out = append(out, filepath.ToSlash(rel)+" is named after a broker ("+b+")")
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// imported is one import of a file: its path and its name ("" when it has none).
type imported struct{ name, path string }

// imports returns the imports of the Go file at path.
func imports(t *testing.T, path string) []imported {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed since go list ran (the tree is shared while tests run)
	}
	if err != nil {
		t.Fatalf("parse the imports of %s: %v", path, err)
	}
	var out []imported
	for _, s := range f.Imports {
		p, err := strconv.Unquote(s.Path.Value)
		if err != nil {
			t.Fatalf("%s: import %s: %v", path, s.Path.Value, err)
		}
		im := imported{path: p}
		if s.Name != nil {
			im.name = s.Name.Name
		}
		out = append(out, im)
	}
	return out
}

// brokerImports lists the broker client and adapter imports of p's files, sorted, once each.
func brokerImports(t *testing.T, p pkg) []string {
	var out []string
	for _, f := range slices.Concat(p.GoFiles, p.TestGoFiles, p.XTestGoFiles, p.IgnoredGoFiles) {
		for _, im := range imports(t, filepath.Join(p.Dir, f)) {
			for _, c := range clients {
				if hasPathPrefix(im.path, c.prefix) {
					out = append(out, im.path)
				}
			}
			if strings.HasPrefix(im.path, module+"/adapters/") {
				out = append(out, im.path)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// moduleRoot returns the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("go env GOMOD: not in a module")
	}
	return filepath.Dir(gomod)
}

// listPackages returns every package of the module (nested modules, such as tools/kfakebroker,
// are not part of it). Packages that do not build are listed too: only their files matter.
func listPackages(t *testing.T, root string) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Dir,GoFiles,CgoFiles,TestGoFiles,XTestGoFiles,IgnoredGoFiles", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list ./... found %d packages in %s; want the whole module", len(pkgs), root)
	}
	return pkgs
}

// under reports whether rel is one of dirs or inside one of them.
func under(rel string, dirs ...string) bool {
	for _, d := range dirs {
		if rel == d || strings.HasPrefix(rel, d+"/") {
			return true
		}
	}
	return false
}

// hasPathPrefix reports whether import path p is prefix or inside it (github.com/IBM/sarama,
// not github.com/IBM/saramax).
func hasPathPrefix(p, prefix string) bool {
	return p == prefix || strings.HasPrefix(p, prefix+"/") || (strings.HasPrefix(p, prefix) && prefix[len(prefix)-1] == '/')
}
