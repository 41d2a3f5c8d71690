package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/monolock/monolock/go/internal/flaghelp"
	"github.com/monolock/monolock/go/internal/termtext"
)

// `monolock certs` makes a small private CA and the certificates that a
// mutual-TLS set-up of monolock needs, so that nobody has to get openssl's
// extension syntax right by hand. It is meant for development and small
// deployments; a fleet should take its certificates from its own PKI.

const (
	defaultCADays   = 3650 // a CA outlives many leaf renewals
	defaultLeafDays = 365
	caName          = "ca" // DIR/ca.crt and DIR/ca.key
	// Certificates start a few minutes in the past: a client whose clock is
	// slightly behind must not see a fresh certificate as "not yet valid".
	backdate = 5 * time.Minute
)

func certsUsage(w io.Writer) {
	fmt.Fprint(w, `usage: monolock certs <command> [flags]

Make a private CA and certificates for mutual TLS (development and small
deployments). Keys are ECDSA P-256, written with mode 0600; existing files
are never overwritten without --force.

commands:
  init DIR                        a CA: DIR/ca.crt, DIR/ca.key (valid 10 years)
  server --dir DIR --host H...    a server certificate (serverAuth): DIR/server.crt, .key
                                  --host takes IP addresses and DNS names (repeat it
                                  or separate with commas)
  client --dir DIR --cn NAME      a client certificate (clientAuth): DIR/NAME.crt, .key
                                  [--dns NAME]... [--uri URI]... for the ACL's
                                  dns: and uri: identities (the CN is cn:NAME)

Common flags: --days N (validity; leaf certificates 365), --out NAME (file
names), --force (overwrite). See docs/operating.md, "Certificates".
`)
}

// certsMain is `monolock certs`. Exit status: 0 done, 2 bad usage (nothing
// written), 1 a failure to read the CA or write the files.
func certsMain(args []string) int {
	if len(args) == 0 {
		certsUsage(os.Stderr)
		return 2
	}
	var err error
	switch args[0] {
	case "init":
		err = certsInit(args[1:], os.Stdout)
	case "server":
		err = certsLeaf(args[1:], true, os.Stdout)
	case "client":
		err = certsLeaf(args[1:], false, os.Stdout)
	case "-h", "--help", "-help", "help":
		certsUsage(os.Stdout)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "monolock certs: unknown command %q (want init, server or client)\n", args[0])
		return 2
	}
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp): // the command's flags are printed
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "monolock certs %s: %v (see monolock certs -h)\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(os.Stderr, "monolock certs %s: %v\n", args[0], err)
		return 1
	}
}

// listFlag is a repeatable flag; each value may also hold several entries
// separated by commas.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// certsOptions are the flags every certs command shares.
type certsOptions struct {
	dir, out string
	days     int
	force    bool
}

func newCertsFlagSet(name string, o *certsOptions, days int) *flag.FlagSet {
	fs := flag.NewFlagSet("monolock certs "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by certsMain
	fs.StringVar(&o.dir, "dir", "", "`directory` of the CA (ca.crt, ca.key) and of the files written")
	fs.StringVar(&o.out, "out", "", "base `name` of the files written (NAME.crt, NAME.key)")
	fs.IntVar(&o.days, "days", days, "validity in `days`")
	fs.BoolVar(&o.force, "force", false, "overwrite existing files")
	return fs
}

// parseInterspersed parses flags that may come before or after positional
// arguments (`init DIR --force` as well as `init --force DIR`), which the
// flag package alone stops at.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(os.Stdout, "usage: %s [flags]\n\n", fs.Name())
				fmt.Fprint(os.Stdout, flaghelp.Text(fs, flaghelp.Options{}))
				return nil, err
			}
			return nil, badUsage("%v", err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

func (o *certsOptions) check() error {
	if o.dir == "" {
		return badUsage("no directory given (--dir DIR)")
	}
	if o.days < 1 {
		return badUsage("--days must be at least 1, got %d", o.days)
	}
	if most := maxDays(time.Now()); o.days > most {
		return badUsage("--days %d goes past the end of the year 9999, the last date a certificate can carry: at most %d from today", o.days, most)
	}
	if o.out != "" && !safeFileName.MatchString(o.out) {
		return badUsage("--out %q: want a file name without a directory (letters, digits, '.', '_', '-')", o.out)
	}
	return nil
}

// maxDays is the longest validity from now that X.509 can write: its
// dates end with the year 9999.
func maxDays(now time.Time) int {
	last := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	return int(last.Sub(now).Hours() / 24)
}

// safeFileName is what --out (and a client's CN used as its file name)
// may be: one path element, no surprises for a shell.
var safeFileName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]*$`)

// certsInit is `monolock certs init DIR`: a self-signed CA.
func certsInit(args []string, stdout io.Writer) error {
	var o certsOptions
	cn := ""
	fs := newCertsFlagSet("init", &o, defaultCADays)
	fs.StringVar(&cn, "cn", "monolock CA", "common `name` of the CA")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 1:
		return badUsage("unexpected argument %q", pos[1])
	case len(pos) == 1 && o.dir != "" && o.dir != pos[0]:
		return badUsage("two directories given: %q and --dir %q", pos[0], o.dir)
	case len(pos) == 1:
		o.dir = pos[0]
	}
	if o.out != "" {
		return badUsage("--out is not for init: the CA is always ca.crt and ca.key")
	}
	if err := o.check(); err != nil {
		return err
	}
	if cn == "" {
		return badUsage("--cn must not be empty")
	}
	certPath, keyPath := filepath.Join(o.dir, caName+".crt"), filepath.Join(o.dir, caName+".key")
	if err := refuseExisting(o.force, certPath, keyPath); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.AddDate(0, 0, o.days),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // it signs leaf certificates only
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	if err := writePair(certPath, keyPath, der, key); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (CA %q, valid until %s) and %s\n", certPath, cn, tmpl.NotAfter.Format(time.DateOnly), keyPath)
	fmt.Fprintf(stdout, "give %s to the server as --tls-client-ca and to clients as the CA to trust; keep %s private\n", certPath, keyPath)
	return nil
}

// leafSpec is what a server or client certificate names.
type leafSpec struct {
	cn   string
	ips  []net.IP
	dns  []string
	uris []*url.URL
}

// certsLeaf is `monolock certs server` and `monolock certs client`.
func certsLeaf(args []string, server bool, stdout io.Writer) error {
	kind := "client"
	if server {
		kind = "server"
	}
	var o certsOptions
	var hosts, dnsNames, uris listFlag
	var cn string
	fs := newCertsFlagSet(kind, &o, defaultLeafDays)
	if server {
		fs.Var(&hosts, "host", "IP address or DNS `name` clients connect to (repeat or separate with commas)")
		fs.StringVar(&cn, "cn", "", "common `name` (default: the first --host)")
	} else {
		fs.StringVar(&cn, "cn", "", "common `name`: the ACL identity cn:NAME (required)")
		fs.Var(&dnsNames, "dns", "DNS `name` SAN: the ACL identity dns:NAME (repeatable)")
		fs.Var(&uris, "uri", "URI SAN such as a SPIFFE ID: the ACL identity uri:URI (repeatable)")
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return badUsage("unexpected argument %q (the directory is --dir DIR)", pos[0])
	}
	if err := o.check(); err != nil {
		return err
	}
	spec := leafSpec{cn: cn}
	if server {
		if len(hosts) == 0 {
			return badUsage("no --host given: name every IP address and DNS name clients use to reach the server")
		}
		for _, h := range hosts {
			if err := spec.addHost(h); err != nil {
				return err
			}
		}
		if spec.cn == "" {
			spec.cn = hosts[0]
		}
		if o.out == "" {
			o.out = "server"
		}
	} else {
		if cn == "" {
			return badUsage("no --cn given: the client's name, which the ACL matches as cn:NAME")
		}
		for _, d := range dnsNames {
			if err := checkDNSName(d); err != nil {
				return badUsage("--dns %v", err)
			}
			spec.dns = appendNew(spec.dns, strings.ToLower(d))
		}
		for _, u := range uris {
			pu, err := url.Parse(u)
			if err != nil || pu.Scheme == "" || strings.ContainsAny(u, " \t") {
				return badUsage("--uri %q: want an absolute URI such as spiffe://example.org/ns/ci/sa/runner", u)
			}
			spec.uris = append(spec.uris, pu)
		}
		if o.out == "" {
			if !safeFileName.MatchString(cn) {
				return badUsage("--cn %q cannot be a file name: give --out NAME", cn)
			}
			o.out = cn
		}
	}
	if o.out == caName {
		return badUsage("--out %q would overwrite the CA", o.out)
	}
	certPath, keyPath := filepath.Join(o.dir, o.out+".crt"), filepath.Join(o.dir, o.out+".key")
	if err := refuseExisting(o.force, certPath, keyPath); err != nil {
		return err
	}
	ca, caKey, err := loadCA(o.dir)
	if err != nil {
		return err
	}
	der, key, notAfter, err := issue(ca, caKey, spec, server, o.days)
	if err != nil {
		return err
	}
	if err := writePair(certPath, keyPath, der, key); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%s %s, valid until %s) and %s\n", certPath, kind, spec.describe(),
		notAfter.Format(time.DateOnly), keyPath)
	return nil
}

// addHost sorts a --host value into an IP or a DNS SAN.
func (s *leafSpec) addHost(h string) error {
	if ip := net.ParseIP(strings.Trim(h, "[]")); ip != nil {
		for _, have := range s.ips {
			if have.Equal(ip) {
				return nil
			}
		}
		s.ips = append(s.ips, ip)
		return nil
	}
	if err := checkDNSName(h); err != nil {
		return badUsage("--host %v", err)
	}
	if looksNumeric(h) {
		// 010.1.1.1 is no IP address to Go (a leading zero is octal to
		// some resolvers), and a name whose last label is a number is no
		// host name: as a DNS SAN it would match nothing a client dials.
		return badUsage("--host %q: not an IP address (no leading zeros) and, ending in a number, not a DNS name", h)
	}
	s.dns = appendNew(s.dns, strings.ToLower(h))
	return nil
}

// dnsLabel is one label of a host name (RFC 1123), letters, digits and
// hyphens; a leading "*." wildcard is allowed in front of the labels.
var dnsLabel = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// checkDNSName catches the usual slips (a port, a URL, a path) with a
// message that says what was expected.
func checkDNSName(h string) error {
	name := strings.TrimPrefix(h, "*.")
	bad := name == "" || len(name) > 253 || strings.HasSuffix(name, ".")
	for _, label := range strings.Split(name, ".") {
		bad = bad || !dnsLabel.MatchString(label)
	}
	if bad {
		return fmt.Errorf("%q: want an IP address or a DNS name (no port, scheme or path)", h)
	}
	return nil
}

// looksNumeric reports whether the last label of a host name is all
// digits, as in an IPv4 address.
func looksNumeric(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	return strings.Trim(last, "0123456789") == ""
}

func appendNew(list []string, s string) []string {
	for _, have := range list {
		if have == s {
			return list
		}
	}
	return append(list, s)
}

// describe lists the names of a certificate for the summary line.
func (s leafSpec) describe() string {
	parts := []string{"CN " + termtext.Field(s.cn)} // chosen by whoever ran the command
	for _, ip := range s.ips {
		parts = append(parts, "IP "+ip.String())
	}
	for _, d := range s.dns {
		parts = append(parts, "DNS "+d)
	}
	for _, u := range s.uris {
		parts = append(parts, "URI "+u.String())
	}
	return strings.Join(parts, ", ")
}

// issue signs a leaf certificate for spec with the CA.
func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, spec leafSpec, server bool, days int) ([]byte, *ecdsa.PrivateKey, time.Time, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: spec.cn},
		NotBefore:   now.Add(-backdate),
		NotAfter:    now.AddDate(0, 0, days),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		IPAddresses: spec.ips,
		DNSNames:    spec.dns,
		URIs:        spec.uris,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	// A leaf that outlives its CA fails verification on the day the CA
	// expires; say so now rather than then.
	if tmpl.NotAfter.After(ca.NotAfter) {
		return nil, nil, time.Time{}, badUsage("--days %d: the certificate would outlive the CA, which expires on %s",
			days, ca.NotAfter.Format(time.DateOnly))
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return nil, nil, time.Time{}, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	return der, key, tmpl.NotAfter, err
}

// loadCA reads DIR/ca.crt and DIR/ca.key and checks that they belong
// together and can sign.
func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPath, keyPath := filepath.Join(dir, caName+".crt"), filepath.Join(dir, caName+".key")
	if _, err := os.Stat(certPath); errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("no CA in %s (%s is missing): run monolock certs init %s first", dir, certPath, dir)
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("CA %s, %s: %w", certPath, keyPath, err)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("CA %s: %w", certPath, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	switch {
	case !ok:
		return nil, nil, fmt.Errorf("CA key %s: want an ECDSA key as monolock certs init writes", keyPath)
	case !ca.IsCA:
		return nil, nil, fmt.Errorf("%s is not a CA certificate", certPath)
	case time.Now().After(ca.NotAfter):
		return nil, nil, fmt.Errorf("the CA %s expired on %s", certPath, ca.NotAfter.Format(time.DateOnly))
	}
	return ca, key, nil
}

// newSerial is a random 128-bit serial number: unique without a serial
// file, as RFC 5280 asks of a CA.
func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// refuseExisting fails, before anything is written, when a file would be
// overwritten without --force: a lost CA key means new certificates for
// every client.
func refuseExisting(force bool, paths ...string) error {
	if force {
		return nil
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s exists; not overwriting it (use --force to replace it)", p)
		}
	}
	return nil
}

// writePair writes the certificate (0644) and its PKCS #8 key (0600).
func writePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// writeFileAtomic writes through a temporary file and a rename, so that a
// server reading the file on SIGHUP never sees half of it, and a key file
// never exists with a wider mode than perm.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
