package fleetsim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
)

// cleanupTimeout bounds the removal of what a run created, and the end of
// its sessions when the run was cancelled.
const cleanupTimeout = 15 * time.Second

// Cleanup is what a run removed from the server at its end.
type Cleanup struct {
	// Kept is set when Options.Keep left everything in place.
	Kept bool `json:"kept,omitempty"`
	// OutpostDeleted is the outpost the run created and deleted; ""
	// when it was kept, or existed before the run.
	OutpostDeleted string `json:"outpost_deleted,omitempty"`
	// TokensRevoked counts the machine tokens minted by the run and
	// revoked; TokensMinted all it minted.
	TokensRevoked int `json:"tokens_revoked"`
	TokensMinted  int `json:"tokens_minted"`
	// Errors are the removals that failed.
	Errors []string `json:"errors,omitempty"`
}

// cleanup revokes the machine tokens the run minted and deletes the
// outpost it created (with force: a cancelled run may have left sessions
// claimed), unless Options.Keep. It runs also when ctx is cancelled,
// within cleanupTimeout, and says on Progress what it removed.
func (s *sim) cleanup(ctx context.Context) Cleanup {
	s.mu.Lock()
	created, ids := s.createdOutpost, append([]string(nil), s.tokenIDs...)
	s.mu.Unlock()
	c := Cleanup{TokensMinted: len(ids), Kept: s.opts.Keep}
	if s.outpostName == "" && len(ids) == 0 {
		return c
	}
	if s.opts.Keep {
		s.say("kept outpost %s and the %s minted for the run (--keep)", s.outpostName, plural(len(ids), "machine token"))
		return c
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	// Tokens first: with them gone no simulated worker can come back.
	for _, id := range ids {
		if err := s.admin.Tokens.Revoke(cctx, id); err != nil && !client.IsNotFound(err) {
			c.Errors = append(c.Errors, fmt.Sprintf("revoke machine token %s: %v", id, err))
			continue
		}
		c.TokensRevoked++
	}
	if created {
		if err := s.admin.Outposts.Delete(cctx, s.outpostName, true); err != nil && !client.IsNotFound(err) {
			c.Errors = append(c.Errors, fmt.Sprintf("delete outpost %s: %v", s.outpostName, err))
		} else {
			c.OutpostDeleted = s.outpostName
		}
	}
	var removed []string
	if c.OutpostDeleted != "" {
		removed = append(removed, "outpost "+c.OutpostDeleted)
	}
	removed = append(removed, plural(c.TokensRevoked, "machine token"))
	line := "removed " + strings.Join(removed, " and ")
	if !created && s.outpostName != "" {
		line += fmt.Sprintf("; kept outpost %s, which existed before the run", s.outpostName)
	}
	if len(c.Errors) > 0 {
		line += fmt.Sprintf("; %d removals failed: %s", len(c.Errors), strings.Join(c.Errors, "; "))
	}
	s.say("%s", line)
	return c
}

// say prints a line on Progress, when set.
func (s *sim) say(format string, args ...any) {
	if s.opts.Progress != nil {
		fmt.Fprintf(s.opts.Progress, "fleetsim: "+format+"\n", args...)
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// trustHint adds what to do to an error of a server certificate the
// simulator does not trust.
func trustHint(err error) error {
	if tlsconfig.IsVerificationError(err) {
		return fmt.Errorf("%w (a server with a certificate of a private CA needs --ca-file)", err)
	}
	return err
}
