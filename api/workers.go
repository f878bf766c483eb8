package api

import (
	"fmt"
	"regexp"
	"sync"
	"time"
)

// Kinds of connected acceptors (WorkerInfo.Kind).
const (
	WorkerKindWorker       = "worker"
	WorkerKindOrchestrator = "orchestrator"
)

// Worker presence timing. An acceptor announces itself with PUT
// /v1/outposts/{outpost}/workers/{acceptor_id} on start and every
// WorkerHeartbeatInterval; the server forgets it WorkerTTL after its last
// heartbeat (three missed beats), or at once on DELETE (goodbye).
const (
	WorkerHeartbeatInterval = 30 * time.Second
	WorkerTTL               = 3 * WorkerHeartbeatInterval
)

// Worker presence limits.
const (
	// MaxWorkersPerOutpost bounds how many acceptors one outpost may have
	// connected at once.
	MaxWorkersPerOutpost = 10000
	// MaxWorkerInfoBytes bounds the body of a heartbeat.
	MaxWorkerInfoBytes = 64 << 10
)

// acceptorIDRE is what an acceptor id must look like, in claims, releases,
// machine events and presence alike.
var acceptorIDRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$`) })

// AcceptorIDRule says in words what ValidateAcceptorID accepts.
const AcceptorIDRule = "1 to 200 letters, digits, '.', '_', ':', '@' and '-', starting with a letter or digit"

// ValidateAcceptorID returns an error when id cannot name an acceptor (a
// worker or an orchestrator) in a claim, a release, a machine event or a
// heartbeat: see AcceptorIDRule.
func ValidateAcceptorID(id string) error {
	if !acceptorIDRE().MatchString(id) {
		if id == "" {
			return fmt.Errorf("an acceptor id is required: use %s", AcceptorIDRule)
		}
		return fmt.Errorf("acceptor id %q is not valid: use %s", clip(id, 64), AcceptorIDRule)
	}
	return nil
}

// instanceRE is what WorkerInfo.Instance must look like when set.
var instanceRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`) })

// ValidateInstance returns an error when instance, if set, is not 1 to 64
// letters, digits, '.', '_' and '-'.
func ValidateInstance(instance string) error {
	if instance != "" && !instanceRE().MatchString(instance) {
		return fmt.Errorf("instance %q is not valid: use 1 to 64 letters, digits, '.', '_' and '-'", clip(instance, 64))
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// WorkerInfo is the body of a heartbeat: what a worker or orchestrator says
// about itself.
type WorkerInfo struct {
	// Kind is WorkerKindWorker or WorkerKindOrchestrator.
	Kind string `json:"kind"`
	// Hostname is the machine's host name.
	Hostname string `json:"hostname"`
	// Version is the outpost build (machine.Version).
	Version string `json:"version"`
	// Capabilities are the machine's, as machine.Detect reports them.
	Capabilities *Capabilities `json:"capabilities,omitempty"`
	// SessionID is the session being served now, or "" (an orchestrator
	// serving several leaves it empty and counts them in ActiveSessions).
	SessionID string `json:"session_id,omitempty"`
	// MaxSessions is how many sessions the acceptor serves at once (1 for a
	// worker); ActiveSessions how many it serves now.
	MaxSessions    int `json:"max_sessions"`
	ActiveSessions int `json:"active_sessions"`
	// Instance is a random id of the announcing process, new at each
	// start. An acceptor that sends one holds its id exclusively: while
	// its entry is live, a heartbeat of the same acceptor id with another
	// instance is refused (409, CodeAcceptorInUse). Empty (a worker
	// serving one session under its orchestrator's acceptor id, or an
	// older build) takes part in no such check.
	Instance string `json:"instance,omitempty"`
	// PID is the announcing process's id on Hostname, so a restarted
	// worker can tell its own dead predecessor from another live process.
	PID int `json:"pid,omitempty"`
	// Labels are what the worker's operator says about the machine
	// (worker start --label KEY=VALUE), matched exactly by sessions'
	// requirements.labels; see ValidateLabel.
	Labels map[string]string `json:"labels,omitempty"`
	// Isolation is how a worker keeps session code from its own files:
	// none, user or bwrap (worker start --isolation, as resolved).
	Isolation string `json:"isolation,omitempty"`
}

// Worker is a connected acceptor as GET /v1/outposts/{outpost}/workers and
// the heartbeat answer show it.
type Worker struct {
	// AcceptorID is the id the acceptor claims with; OutpostID the outpost
	// it announced itself on.
	AcceptorID string `json:"acceptor_id"`
	OutpostID  string `json:"outpost_id"`
	WorkerInfo
	// ConnectedAt is when the acceptor's first heartbeat of this connection
	// arrived; LastSeenAt its latest; ExpiresAt when the server forgets it
	// without another (Unix seconds).
	ConnectedAt int64 `json:"connected_at"`
	LastSeenAt  int64 `json:"last_seen_at"`
	ExpiresAt   int64 `json:"expires_at"`
	// HeartbeatIntervalS is how often the server expects a heartbeat.
	HeartbeatIntervalS int64 `json:"heartbeat_interval_s"`
	// Online is false for an acceptor that said goodbye or stopped
	// heartbeating (ExpiresAt passed): lists show such entries with
	// ?offline=true for a day, with their last heartbeat.
	Online bool `json:"online"`
}

// WorkerList is the answer of GET /v1/outposts/{outpost}/workers and GET
// /v1/workers: the acceptors, sorted by outpost and acceptor id.
type WorkerList struct {
	Items []Worker `json:"items"`
	// Total is len(Items): the list is not paged.
	Total int `json:"total"`
}
