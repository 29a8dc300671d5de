package kafka

// Secured test clusters: kfake (github.com/twmb/franz-go/pkg/kfake) run with SASL users or a
// TLS listener, in a child process on loopback. kfake is not imported here: the library's
// go.mod must not depend on franz-go (see tools/kfakebroker, whose go.mod and go.sum pin it).
// The child program below is built once per test binary from a temporary module with exactly
// those pins, from the module cache that `source .ci/services/kafka.sh` filled.

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/millrace/millrace/internal/testenv"
)

// securedBrokerSource is the child program: a one-broker kfake cluster on 127.0.0.1 with the
// SASL superusers and TLS listener its flags give. It prints its address, then runs until its
// standard input closes (the test process ended or closed it).
const securedBrokerSource = `package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	users := flag.String("users", "", "SASL superusers, MECHANISM:user:password separated by newlines")
	cert := flag.String("tls-cert", "", "server certificate (PEM)")
	key := flag.String("tls-key", "", "server key (PEM)")
	clientCA := flag.String("tls-client-ca", "", "require client certificates signed by this CA (PEM)")
	flag.Parse()
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DefaultNumPartitions(1),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }),
	}
	if *users != "" {
		opts = append(opts, kfake.EnableSASL())
		for _, u := range strings.Split(*users, "\n") {
			f := strings.SplitN(u, ":", 3)
			opts = append(opts, kfake.Superuser(f[0], f[1], f[2]))
		}
	}
	if *cert != "" {
		pair, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			log.Fatal(err)
		}
		tc := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
		if *clientCA != "" {
			pem, err := os.ReadFile(*clientCA)
			if err != nil {
				log.Fatal(err)
			}
			tc.ClientCAs = x509.NewCertPool()
			tc.ClientCAs.AppendCertsFromPEM(pem)
			tc.ClientAuth = tls.RequireAndVerifyClientCert
		}
		opts = append(opts, kfake.TLS(tc))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.ListenAddrs()[0])
	_, _ = io.Copy(io.Discard, os.Stdin)
	c.Close()
}
`

var (
	securedBrokerOnce sync.Once
	securedBrokerBin  string
	securedBrokerErr  error
)

// buildSecuredBroker builds the child program once per test binary, with tools/kfakebroker's
// pinned modules, into a directory of the system's temporary directory named by a hash of its
// source and pins: later test runs reuse the binary, and nothing is left per run.
func buildSecuredBroker() (string, error) {
	securedBrokerOnce.Do(func() {
		securedBrokerBin, securedBrokerErr = buildSecuredBrokerOnce()
	})
	return securedBrokerBin, securedBrokerErr
}

func buildSecuredBrokerOnce() (string, error) {
	mod, err := os.ReadFile("../../tools/kfakebroker/go.mod")
	if err != nil {
		return "", err
	}
	sum, err := os.ReadFile("../../tools/kfakebroker/go.sum")
	if err != nil {
		return "", err
	}
	mod = []byte(strings.Replace(string(mod), "module github.com/millrace/millrace/tools/kfakebroker", "module securedbroker", 1))
	h := sha256.New()
	for _, b := range [][]byte{mod, sum, []byte(securedBrokerSource), []byte(runtime.Version())} {
		h.Write(b)
		h.Write([]byte{0})
	}
	home := filepath.Join(os.TempDir(), "millrace-kfake-secured-"+hex.EncodeToString(h.Sum(nil))[:16])
	bin := filepath.Join(home, "securedbroker")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(home, 0o755); err != nil {
		return "", err
	}
	src, err := os.MkdirTemp(home, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	for name, data := range map[string][]byte{"go.mod": mod, "go.sum": sum, "main.go": []byte(securedBrokerSource)} {
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			return "", err
		}
	}
	cmd := exec.Command(goTool, "build", "-mod=readonly", "-buildvcs=false", "-o", filepath.Join(src, "securedbroker"), ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the kfake child program in %s: %v\n%s", src, err, out)
	}
	// Renamed into place whole: a concurrent test run sees no binary or a complete one.
	if err := os.Rename(filepath.Join(src, "securedbroker"), bin); err != nil {
		return "", err
	}
	return bin, nil
}

// securedCluster starts a kfake cluster with args (see securedBrokerSource) and returns its
// address; it is stopped with t.
func securedCluster(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := buildSecuredBroker()
	if err != nil {
		testenv.Unreachable(t, "kfake (secured)", "child process", "CI", err)
	}
	cmd := exec.Command(bin, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		if s.Scan() {
			line <- s.Text()
		}
		close(line)
	}()
	select {
	case addr, ok := <-line:
		if !ok || !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Fatalf("kfake child printed %q, want its 127.0.0.1 address", addr)
		}
		return addr
	case <-time.After(30 * time.Second):
		t.Fatal("kfake child did not print its address within 30s")
	}
	return ""
}

// testPKI is a CA and the certificates it signed, as PEM files in a test directory.
type testPKI struct {
	dir                 string
	ca, caKey           string // CA certificate
	server, serverKey   string // for DNS name serverName only
	client, clientKey   string // client certificate
	caCert              *x509.Certificate
	caPriv              *ecdsa.PrivateKey
	serial              int64
	notBefore, notAfter time.Time
	serverName          string
}

// newTestPKI makes a CA in dir with a server certificate for "kafka.test" and a client one.
func newTestPKI(t *testing.T, dir, name string) *testPKI {
	t.Helper()
	p := &testPKI{dir: dir, notBefore: time.Now().Add(-time.Hour), notAfter: time.Now().Add(24 * time.Hour), serverName: "kafka.test"}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " test CA"},
		NotBefore: p.notBefore, NotAfter: p.notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	p.caCert, err = x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p.caPriv = priv
	p.ca, p.caKey = p.write(t, name+"-ca", der, priv)
	p.server, p.serverKey = p.issue(t, name+"-server", &x509.Certificate{
		Subject: pkix.Name{CommonName: p.serverName}, DNSNames: []string{p.serverName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	p.client, p.clientKey = p.issue(t, name+"-client", &x509.Certificate{
		Subject: pkix.Name{CommonName: "millrace test client"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return p
}

// issue signs tmpl with the CA and writes it and its key.
func (p *testPKI) issue(t *testing.T, name string, tmpl *x509.Certificate) (string, string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl.SerialNumber = big.NewInt(p.serial + 1)
	tmpl.NotBefore, tmpl.NotAfter = p.notBefore, p.notAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &priv.PublicKey, p.caPriv)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name, der, priv)
}

// write stores a certificate and its key as PEM files and returns their paths.
func (p *testPKI) write(t *testing.T, name string, der []byte, priv *ecdsa.PrivateKey) (string, string) {
	t.Helper()
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+"-key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}
