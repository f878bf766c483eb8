package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/internal/atomicfile"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// The files of `outpost certs create`, in its --dir.
const (
	certsCA     = "ca.crt"
	certsCAKey  = "ca.key"
	certsServer = "tls.crt"
	certsKey    = "tls.key"
)

// CertsCreateOptions are the settings of `outpost certs create`.
type CertsCreateOptions struct {
	f *Factory
	// Names are the server's host names and IP addresses.
	Names []string
	// Dir holds the CA and the server's pair; "" means the current
	// directory.
	Dir string
	// Days is how long the server certificate is valid; CADays the CA.
	Days, CADays int
	// Force replaces an existing server pair (a renewal, or new names).
	Force bool
	// KeyGroup, when set, may read tls.key (0640): the group of the
	// server's user, which reads it.
	KeyGroup string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// NewCmdCerts returns `outpost certs`.
func NewCmdCerts(f *Factory, runF func(context.Context, *CertsCreateOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make a private CA and the server's TLS certificate",
	}
	o := &CertsCreateOptions{f: f}
	create := &cobra.Command{
		Use:   "create --name HOST [--name HOST...] [--dir DIR]",
		Short: "Make a private CA (once) and a server certificate signed by it",
		Long: `Make what a server needs to speak TLS itself when no public CA signs its
name: a private certificate authority, ca.crt and ca.key (made once, reused
after), and a certificate for the server's names, tls.crt and tls.key,
signed by it, all in --dir (default the current directory). Keys are
ECDSA P-256 and mode 0600; certificates 0644.

Give every name clients use to reach the server, host names and IP
addresses alike (--name, repeatable). Then start the server with
--tls-cert DIR/tls.crt --tls-key DIR/tls.key (tls-cert: and tls-key: in
server.yaml), and give workers, orchestrators and the CLI the CA with
--ca-file DIR/ca.crt (or OUTPOST_CA_FILE; 'outpost login --ca-file' saves
it). Keep ca.key off the server if you can: only this command needs it.

Run it again with --force to renew the server certificate or change its
names (tls.key keeps the group --key-group gave it); the server reads the
new pair within seconds, and clients keep trusting the same ca.crt.`,
		Example: `  sudo outpost certs create --name outpost.example.com --name 10.0.0.5 --dir /etc/outpost --key-group outpost
  outpost certs create --name 127.0.0.1 --name localhost --dir ./tls --days 30
  sudo outpost certs create --name outpost.example.com --dir /etc/outpost --force   # renew`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(o.Names) == 0 {
				return usageErrorf("needs --name: each host name and IP address clients use to reach the server")
			}
			for _, n := range o.Names {
				if net.ParseIP(n) == nil {
					if err := tlsconfig.CheckDNSName(n); err != nil {
						return usageError{err}
					}
				}
			}
			if o.Days < 1 || o.CADays < 1 {
				return usageErrorf("--days and --ca-days must be at least 1")
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return runCertsCreate(cmd.Context(), o)
		},
	}
	fl := create.Flags()
	fl.StringArrayVar(&o.Names, "name", nil, "a host name or IP address of the server (repeatable)")
	fl.StringVar(&o.Dir, "dir", "", "directory of the CA and the server's files (default the current directory)")
	fl.IntVar(&o.Days, "days", 397, "days the server certificate is valid (browsers accept at most 398)")
	fl.IntVar(&o.CADays, "ca-days", 3650, "days a new CA is valid")
	fl.BoolVar(&o.Force, "force", false, "replace an existing tls.crt and tls.key (renew, or change the names)")
	fl.StringVar(&o.KeyGroup, "key-group", "", "group that may read tls.key (mode 0640): the server's, e.g. outpost when the server runs as that user (a renewal keeps the old key's group)")
	cmd.AddCommand(create)
	return cmd
}

func runCertsCreate(_ context.Context, o *CertsCreateOptions) error {
	f := o.f
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	dir := o.Dir
	if dir == "" {
		wd, err := f.Getwd()
		if err != nil {
			return err
		}
		dir = wd
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	if !o.Force {
		for _, name := range []string{certsServer, certsKey} {
			if _, err := os.Stat(path(name)); err == nil {
				return usageErrorf("%s already exists: pass --force to replace the server's certificate and key (a renewal), or another --dir", path(name))
			}
		}
	}
	ca, made, err := loadOrMakeCA(dir, now(), time.Duration(o.CADays)*24*time.Hour)
	if err != nil {
		return err
	}
	pair, err := tlsconfig.IssueServer(ca, o.Names, now(), time.Duration(o.Days)*24*time.Hour)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	var files []string
	if made {
		// Never over a CA key that appeared since loadOrMakeCA looked (a
		// second certs create in the same --dir): certificates signed with
		// it would stop verifying.
		if err := writeNewFile(path(certsCAKey), ca.Key, 0o600); errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s appeared while this command made a CA (another certs create?); it was kept: run again to sign with it", path(certsCAKey))
		} else if err != nil {
			return fmt.Errorf("write the CA key: %w", err)
		}
		if err := atomicfile.Write(path(certsCA), ca.Cert, 0o644); err != nil {
			return fmt.Errorf("write the CA certificate: %w", err)
		}
		files = append(files, path(certsCA)+" (the CA: give it to clients)", path(certsCAKey)+" (the CA's key, 0600: keep it safe)")
	}
	// The key first: a server reloading between the two writes sees a
	// pair that does not match, keeps the old one and tries again.
	keyMode := fs.FileMode(0o600)
	gid := -1
	if o.KeyGroup != "" {
		g, err := user.LookupGroup(o.KeyGroup)
		if err != nil {
			return usageErrorf("--key-group %s: %v", o.KeyGroup, err)
		}
		if gid, err = strconv.Atoi(g.Gid); err != nil {
			return usageErrorf("--key-group %s: this platform has no numeric groups", o.KeyGroup)
		}
		keyMode = 0o640
	} else if fi, err := os.Stat(path(certsKey)); err == nil && fi.Mode().Perm()&0o040 != 0 {
		// A renewal without --key-group keeps the group that reads the
		// old key: the server running as that group's user must read the
		// new one too.
		if _, g, ok := fileOwner(fi); ok {
			gid, keyMode = int(g), 0o640
		}
	}
	if err := atomicfile.Write(path(certsKey), pair.Key, keyMode); err != nil {
		return fmt.Errorf("write the server key: %w", err)
	}
	if gid >= 0 {
		if err := os.Chown(path(certsKey), -1, gid); err != nil {
			return fmt.Errorf("give %s to group %d: %w", path(certsKey), gid, err)
		}
	}
	if err := atomicfile.Write(path(certsServer), pair.Cert, 0o644); err != nil {
		return fmt.Errorf("write the server certificate: %w", err)
	}
	files = append(files, path(certsServer), fmt.Sprintf("%s (%04o)", path(certsKey), keyMode))
	out := f.IO.Out
	if !made {
		fmt.Fprintf(out, "Signed with the existing CA in %s.\n", path(certsCA))
	}
	fmt.Fprintf(out, "Wrote:\n")
	for _, file := range files {
		fmt.Fprintf(out, "  %s\n", file)
	}
	fmt.Fprintf(out, `
The server certificate is valid for %d days for: %v.
Start the server with it (or put these keys in server.yaml):
  outpost server --tls-cert %s --tls-key %s ...
Give clients the CA (copy %s to each machine):
  outpost login --server https://%s --ca-file %s
  outpost worker start --outpost NAME --ca-file %s
`, o.Days, o.Names, path(certsServer), path(certsKey), path(certsCA), net.JoinHostPort(o.Names[0], "7420"), path(certsCA), path(certsCA))
	return nil
}

// loadOrMakeCA reads the CA in dir, or makes one when there is none
// (made reports which).
func loadOrMakeCA(dir string, now time.Time, validFor time.Duration) (ca tlsconfig.PEM, made bool, err error) {
	certPath, keyPath := filepath.Join(dir, certsCA), filepath.Join(dir, certsCAKey)
	cert, cerr := os.ReadFile(certPath)
	key, kerr := os.ReadFile(keyPath)
	switch {
	case cerr == nil && kerr == nil:
		return tlsconfig.PEM{Cert: cert, Key: key}, false, nil
	case errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist):
		ca, err := tlsconfig.NewCA("Outpost private CA", now, validFor)
		return ca, true, err
	case cerr == nil:
		return ca, false, fmt.Errorf("%s exists but its key %s cannot be read (%w): the server certificate needs the CA's key", certPath, keyPath, kerr)
	default:
		return ca, false, fmt.Errorf("the CA certificate %s cannot be read: %w", certPath, cerr)
	}
}

// writeNewFile writes data to path with mode perm, failing with an error
// that wraps fs.ErrExist when anything (a file, a link) is at path
// already; a part written is removed.
func writeNewFile(path string, data []byte, perm fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
