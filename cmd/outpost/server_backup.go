package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/datadir"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// pgDumpHint tells what backs up a server on PostgreSQL.
var pgDumpHint = `back the database up with pg_dump (pg_dump --format=custom --file outpost.dump "$` + envDatabaseURL.Name + `"), ` +
	`and keep the secret key and the data dir's artifacts/ and output/ with it; see docs/production.md#backups`

// ServerBackupOptions are the settings of `outpost server backup`.
type ServerBackupOptions struct {
	f             *Factory
	File          string
	DataDir       string
	SecretKeyFile string
	// ExcludeSecretKey leaves the key out of the archive.
	ExcludeSecretKey bool
	// ExcludeFiles leaves artifacts/ and output/ out.
	ExcludeFiles bool
}

// NewCmdServerBackup returns `outpost server backup`. runF replaces the run
// in tests.
func NewCmdServerBackup(f *Factory, runF func(context.Context, *ServerBackupOptions) error) *cobra.Command {
	opts := &ServerBackupOptions{f: f}
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Write a consistent backup of the server's data dir, while it runs",
		Long: `Write a backup of an embedded-SQLite server's data dir to FILE, a gzip tar
archive (mode 0600): a consistent copy of the database, made in one read
transaction while the server goes on serving (SQLite's VACUUM INTO through a
read-only connection; run it as the server's user, on the server's machine),
checked with PRAGMA integrity_check; the key session secrets are sealed with;
the admin-token file; the sessions' artifacts and spilled output; and last a
manifest. FILE is replaced only once the new archive is complete.

The key: the archive holds <data-dir>/secret-key (or --secret-key-file), so a
restore needs nothing else, and anyone holding the archive can read the
sessions' secrets. With --exclude-secret-key, or when the server's key is in
OUTPOST_SECRET_KEY, the archive holds no key and a restored server needs the
same key given again (the command says which, by id).

A server on PostgreSQL (--database) is backed up with pg_dump instead; this
command refuses it. Restore with 'outpost server restore'.`,
		Example: `  outpost server backup /backups/outpost-$(date +%F).tar.gz
  OUTPOST_DATA_DIR=/var/lib/outpost outpost server backup /mnt/backups/outpost.tar.gz
  outpost server backup --exclude-secret-key --exclude-files /backups/db-only.tar.gz   # the key kept apart`,
		Args: exactArgs(1, "the archive to write (FILE)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			fl := cmd.Flags()
			if err := resolveDataDir(fl, f, &opts.DataDir); err != nil {
				return err
			}
			envFallback{fl: fl, getenv: f.Getenv}.string("secret-key-file", envSecretKeyFile, &opts.SecretKeyFile)
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runServerBackup(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.DataDir, "data-dir", "", "the server's data directory (env "+envDataDir.Name+"; default $XDG_DATA_HOME/outpost or ~/.local/share/outpost)")
	fl.StringVar(&opts.SecretKeyFile, "secret-key-file", "", "the server's key file, when not <data-dir>/secret-key (env "+envSecretKeyFile.Name+")")
	fl.BoolVar(&opts.ExcludeSecretKey, "exclude-secret-key", false, "leave the secret key out of the archive (keep it apart yourself: a restore needs it)")
	fl.BoolVar(&opts.ExcludeFiles, "exclude-files", false, "leave the sessions' artifacts and spilled output out of the archive")
	return cmd
}

// resolveDataDir fills a data dir flag not given from OUTPOST_DATA_DIR,
// then the server's default.
func resolveDataDir(fl *pflag.FlagSet, f *Factory, dir *string) error {
	envFallback{fl: fl, getenv: f.Getenv}.string("data-dir", envDataDir, dir)
	if *dir == "" {
		d, err := defaultServerDataDir(f)
		if err != nil {
			return err
		}
		*dir = d
	}
	return nil
}

func runServerBackup(ctx context.Context, o *ServerBackupOptions) error {
	f := o.f
	if db := envDatabaseURL.Get(f.Getenv); db != "" && server.IsPostgresURL(db) {
		return fmt.Errorf("this server keeps its state in PostgreSQL (%s), which outpost server backup does not copy: %s", envDatabaseURL.Name, pgDumpHint)
	}
	if _, err := os.Stat(filepath.Join(o.DataDir, datadir.Database)); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("there is no database at %s: give the server's --data-dir (or %s). A server on PostgreSQL (--database): %s",
			filepath.Join(o.DataDir, datadir.Database), envDataDir.Name, pgDumpHint)
	}

	warn := func(format string, args ...any) { fmt.Fprintf(f.IO.ErrOut, "WARNING: "+format+"\n", args...) }
	keyFile := o.SecretKeyFile
	if keyFile == "" {
		keyFile = filepath.Join(o.DataDir, datadir.SecretKey)
	}
	bo := datadir.BackupOptions{DataDir: o.DataDir, LeaveOutFiles: o.ExcludeFiles, Version: version}
	envKey := envSecretKey.Get(f.Getenv)
	switch {
	case envKey != "":
		id := "unreadable"
		if k, err := sealed.ParseKey(envKey); err == nil {
			id = sealed.KeyID(k)
		}
		warn("the server's key is in %s (key id %s); the archive does not hold it. A restored server needs that same key: keep it apart, safely.", envSecretKey.Name, id)
	case o.ExcludeSecretKey:
		warn("the archive holds no secret key (--exclude-secret-key). A restored server needs the key in %s: keep a copy of it apart, safely, or the sessions' secrets are lost.", keyFile)
	default:
		if _, err := os.Stat(keyFile); err == nil || o.SecretKeyFile != "" {
			bo.SecretKeyFile = keyFile
		} else {
			warn("there is no key file at %s, so the archive holds no key: a restored server needs the key the server is given (%s or --secret-key-file).", keyFile, envSecretKey.Name)
		}
	}
	m, err := datadir.Backup(ctx, o.File, bo)
	if err != nil {
		return err
	}
	if !m.KeyOpensAll() {
		if m.SecretKeyID != "" {
			warn("the sessions' secrets are sealed under key id(s) %s, not only the archived key %s: a restored server also needs those keys (%s).", strings.Join(m.SealedWith, ", "), m.SecretKeyID, envSecretKeysOld.Name)
		} else if envKey == "" && !o.ExcludeSecretKey {
			warn("the sessions' secrets are sealed under key id(s) %s, which a restored server needs.", strings.Join(m.SealedWith, ", "))
		}
	}
	if f.JSON() {
		return printJSON(f.IO.Out, map[string]any{"file": o.File, "manifest": m})
	}
	files := fmt.Sprintf("%d files (%s) of artifacts and output", m.Files, api.ByteSize(m.Bytes))
	if m.FilesLeftOut {
		files = "no artifacts or output (--exclude-files)"
	}
	fmt.Fprintf(f.IO.Out, "Backed up %s to %s: the database (%d sessions, schema %d, %s) and %s.\n",
		m.DataDir, o.File, m.Sessions, lastOf(m.Migrations), api.ByteSize(m.DatabaseBytes), files)
	if m.SecretKeyID != "" {
		fmt.Fprintf(f.IO.Out, "The archive holds the secret key (key id %s): keep it as private as the data dir; with it anyone can read the sessions' secrets.\n", m.SecretKeyID)
	}
	return nil
}

// ServerRestoreOptions are the settings of `outpost server restore`.
type ServerRestoreOptions struct {
	f       *Factory
	File    string
	DataDir string
	Force   bool
}

// NewCmdServerRestore returns `outpost server restore`. runF replaces the
// run in tests.
func NewCmdServerRestore(f *Factory, runF func(context.Context, *ServerRestoreOptions) error) *cobra.Command {
	opts := &ServerRestoreOptions{f: f}
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Restore a backup into an empty data dir",
		Long: `Restore an archive made by 'outpost server backup' into the data dir, which
must be empty (--force replaces the database, admin-token, artifacts/ and
output/ of one that is not, and its secret-key when the archive holds one).
It refuses while a server uses the data dir (the server holds a lock on
<data-dir>/server.lock), and holds that lock itself, so no server starts on
the directory before the restore is done.

The archive is unpacked and checked before anything is put in place: it must
be complete, hold only what a backup holds, and its database must pass
PRAGMA integrity_check and be of a schema this version knows (a backup of a
newer version is refused: restore it with that version). Then start the
server on the data dir; it migrates an older database at start.`,
		Example: `  outpost server restore /backups/outpost-2026-05-01.tar.gz --data-dir /var/lib/outpost
  outpost server restore backup.tar.gz --data-dir /var/lib/outpost --force   # replace what is there`,
		Args: exactArgs(1, "the archive to restore (FILE)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.File = args[0]
			if err := resolveDataDir(cmd.Flags(), f, &opts.DataDir); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runServerRestore(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.DataDir, "data-dir", "", "the data directory to restore into (env OUTPOST_DATA_DIR; default $XDG_DATA_HOME/outpost or ~/.local/share/outpost)")
	fl.BoolVar(&opts.Force, "force", false, "restore into a data dir that is not empty, replacing its database and files")
	return cmd
}

func runServerRestore(ctx context.Context, o *ServerRestoreOptions) error {
	f := o.f
	res, err := datadir.Restore(ctx, o.File, datadir.RestoreOptions{DataDir: o.DataDir, Force: o.Force})
	var ne *datadir.NotEmptyError
	switch {
	case errors.As(err, &ne):
		return fmt.Errorf("%w: restore into an empty directory, or give --force to replace its database and files", err)
	case errors.Is(err, datadir.ErrLocked):
		return fmt.Errorf("%w: stop that server before restoring", err)
	case err != nil:
		return err
	}
	m := res.Manifest
	if f.JSON() {
		return printJSON(f.IO.Out, map[string]any{"data_dir": o.DataDir, "manifest": m, "secret_key_id": res.KeyID})
	}
	fmt.Fprintf(f.IO.Out, "Restored %s (made %s by outpost %s: %d sessions, %d files) into %s.\n",
		o.File, m.CreatedAt.Format("2006-01-02 15:04:05 UTC"), m.Version, m.Sessions, m.Files, o.DataDir)
	var missing []string
	for _, id := range m.SealedWith {
		if id != "" && id != res.KeyID {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(f.IO.ErrOut, "WARNING: the sessions' secrets are sealed under key id(s) %s, which %s does not hold: start the server with that key in %s (or written to %s), or it refuses to start.\n",
			strings.Join(missing, ", "), filepath.Join(o.DataDir, datadir.SecretKey), envSecretKey.Name, filepath.Join(o.DataDir, datadir.SecretKey))
	}
	fmt.Fprintf(f.IO.Out, "Start the server with --data-dir %s.\n", o.DataDir)
	return nil
}

// lastOf is the last element of s, 0 when empty.
func lastOf(s []int) int {
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1]
}
