//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestReplicasKill9 runs a dozen four-step script sessions on three
// workers through the balancer; each step appends a marker line to a file
// outside every workspace. Mid-way the replica holding the most remotes is
// killed with SIGKILL, and later started again. Every session ends
// exit/finished, every marker is in the file exactly once (no step ran
// twice or was lost), every call has exactly one result, the transcripts
// read from each replica directly are identical, and a live follower of
// each session through the balancer saw every event once, in order.
func TestReplicasKill9(t *testing.T) {
	t.Parallel()
	const sessions, steps = 12, 4
	rs := startReplicaSet(t, replicaOptions{})
	token := setupOutpost(t, rs.front, "fleet")
	for range 3 {
		startWorker(t, rs.front, "fleet", token)
	}
	rs.waitWorkers("fleet", 3)
	markers := t.TempDir() + "/markers"

	cl := adminClient(t, rs.front)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ids := make([]string, sessions)
	for i := range ids {
		var st []api.Step
		for k := range steps {
			st = append(st, execStep(fmt.Sprintf(`echo "%s" >> '%s'; sleep 0.2`, replicaMarker(i, k), markers)))
		}
		s, err := cl.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "fleet", Title: fmt.Sprintf("marked %d", i),
			Agent: api.Agent{Kind: api.AgentScript, Steps: st}})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = s.Metadata.SessionID
	}
	// A live follower of each session through the balancer: one whose
	// stream was on the killed replica reconnects to another and resumes
	// after the last event it saw.
	followed := make([][]int64, sessions)
	followErrs := make([]error, sessions)
	var follows sync.WaitGroup
	followCtx, stopFollows := context.WithCancel(ctx)
	defer stopFollows()
	for i, id := range ids {
		follows.Go(func() {
			followErrs[i] = cl.Sessions.Follow(followCtx, id, 0, func(ev api.Event) error {
				if ev.Seq > 0 {
					followed[i] = append(followed[i], ev.Seq)
				}
				return nil
			})
		})
	}
	count := func() int {
		b, _ := os.ReadFile(markers)
		return strings.Count(string(b), "\n")
	}

	// Mid-way: kill the replica holding the remote of a session in a call.
	waitfor.Within(t, 2*time.Minute, "a quarter of the markers", func() bool { return count() >= sessions*steps/4 })
	// The victim is the replica holding the most remotes of running
	// sessions at that moment.
	victim, held := -1, 0
	waitfor.Within(t, 30*time.Second, "a running session's remote", func() bool {
		per := make([]int, len(rs.replicas))
		for _, id := range ids {
			if h := rs.lb.Holder(id); h >= 0 {
				per[h]++
			}
		}
		for i, n := range per {
			if n > held {
				victim, held = i, n
			}
		}
		return victim >= 0
	})
	atKill := count()
	rs.kill9(victim)
	t.Logf("killed replica %s, holding %d remotes, with SIGKILL at %d of %d markers", rs.replicas[victim].id, held, atKill, sessions*steps)

	// Later, start it again, on the same address.
	waitfor.Within(t, 2*time.Minute, "more markers without the killed replica", func() bool { return count() >= atKill+sessions*steps/4 })
	rs.start(victim)
	t.Logf("restarted replica %s at %d markers", rs.replicas[victim].id, count())

	for _, id := range ids {
		s := rs.front.waitFinal(id, 2*time.Minute)
		if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
			t.Errorf("session %s ended %s/%s: %s", id, s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
		}
	}
	// Every session ended: each follower has its end event within
	// moments, or never will.
	followsDone := make(chan struct{})
	go func() { follows.Wait(); close(followsDone) }()
	select {
	case <-followsDone:
	case <-time.After(10 * time.Second):
		stopFollows()
		<-followsDone
	}
	b, err := os.ReadFile(markers)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]int{}
	for _, l := range strings.Fields(string(b)) {
		lines[l]++
	}
	for i := range sessions {
		for k := range steps {
			m := replicaMarker(i, k)
			if lines[m] != 1 {
				t.Errorf("marker %s (session %s, step %d) is in the file %d times, want once", m, ids[i], k+1, lines[m])
			}
			delete(lines, m)
		}
	}
	if len(lines) > 0 {
		t.Errorf("unexpected lines in the marker file: %v", lines)
	}
	for _, id := range ids {
		// An ended session's transcript may still grow by an event or two
		// (its claimer's release, the remote's goodbye) between the reads
		// of one replica and the next: read all three until they agree,
		// so only a replica that misses an event for good fails the
		// comparison below.
		per := make([][]api.Event, len(rs.replicas))
		pollCtx, stopPoll := context.WithTimeout(ctx, 20*time.Second)
		waitfor.Poll(pollCtx, func() bool {
			for i, r := range rs.replicas {
				per[i] = r.direct.events(id)
			}
			for _, evs := range per[1:] {
				if !reflect.DeepEqual(evs, per[0]) {
					return false
				}
			}
			return true
		})
		stopPoll()
		var first []api.Event
		for i, r := range rs.replicas {
			evs := per[i]
			if i == 0 {
				first = evs
				calls, results := map[int64]int{}, map[int64]int{}
				for _, ev := range evs {
					switch ev.Type {
					case api.EventCall:
						calls[ev.CallSeq]++
					case api.EventResult:
						results[ev.CallSeq]++
					}
				}
				for seq := int64(1); seq <= steps; seq++ {
					if calls[seq] != 1 || results[seq] != 1 {
						t.Errorf("session %s call %d: %d call events and %d results, want one each", id, seq, calls[seq], results[seq])
					}
				}
				continue
			}
			if i == 1 {
				if followErrs[slices.Index(ids, id)] != nil {
					t.Errorf("the follower of %s: %v", id, followErrs[slices.Index(ids, id)])
				}
				var want []int64 // up to the end event, where a follow stops
				for _, ev := range evs {
					want = append(want, ev.Seq)
					if ev.Type == api.EventEnd {
						break
					}
				}
				if got := followed[slices.Index(ids, id)]; !slices.Equal(got, want) {
					t.Errorf("the follower of %s through the balancer saw seqs %v, want %v once each in order", id, got, want)
				}
			}
			if !reflect.DeepEqual(evs, first) {
				t.Errorf("the transcript of %s read from %s (%d events) differs from %s's (%d events)", id, r.id, len(evs), rs.replicas[0].id, len(first))
			}
		}
	}
}

// replicaMarker is the line step k of session i appends.
func replicaMarker(i, k int) string { return fmt.Sprintf("s%02d-step%d", i, k+1) }

// TestReplicasStartTogether starts three replicas at once on an empty
// database, as the pods of a Deployment do, with the same admin token:
// they migrate once between them, each becomes ready, and a session runs
// through the balancer.
func TestReplicasStartTogether(t *testing.T) {
	t.Parallel()
	rs := startReplicaSet(t, replicaOptions{Together: true})
	token := setupOutpost(t, rs.front, "together")
	startWorker(t, rs.front, "together", token)
	id := createSession(t, rs.front, apiScriptSession("together", "after a joint start", execStep("echo started-together")))
	s := rs.front.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	for _, r := range rs.replicas {
		var tokens api.TokenList
		if code := r.direct.api("GET", "/v1/tokens", adminToken, nil, &tokens); code != 200 {
			t.Errorf("the admin token on %s: %d", r.id, code)
		}
	}
}
