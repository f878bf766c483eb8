// Package operator is `outpost operator`: a Kubernetes controller that
// serves OutpostPools (operator/v1alpha1). Each pool runs one fleet.Consumer
// whose Runner gives every claimed session a Pod of its own, with a
// per-session Secret holding only the claim's connect token (and, with the
// FilesystemSnapshot resume policy, a PersistentVolumeClaim as its
// workspace), reports the pod's provisioning on the session's transcript
// and deletes what it made when the session ends.
//
// Run is the operator: a controller-runtime manager with optional leader
// election (a Lease; only the leader claims), /healthz and /readyz, and
// Prometheus metrics. The pool's own token, read from its Secret, never
// leaves the operator and is sent only to servers its allow list names.
// A stopping operator leaves its pods running and its claims held; the
// next one (or the next leader) adopts them.
package operator

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// Labels and annotations on every Pod, Secret and PersistentVolumeClaim the
// operator makes. They are the operator's layer of the pod: a template
// cannot override them. Ownership is still decided by the owner reference's
// UID, never by labels alone.
const (
	// LabelManagedBy is the standard label naming the manager.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is LabelManagedBy's value, and the field manager of the
	// operator's writes.
	ManagedBy = "outpost-operator"
	// LabelName is the standard name label.
	LabelName = "app.kubernetes.io/name"
	// NameSession is LabelName's value.
	NameSession = "outpost-session"
	// LabelPool is the name of the OutpostPool that made the object.
	LabelPool = "outpost.dev/pool"
	// LabelSessionID is the session the object serves.
	LabelSessionID = "outpost.dev/session-id"
	// AnnotationOutpostID is the id of the outpost served.
	AnnotationOutpostID = "outpost.dev/outpost-id"
	// AnnotationRestarts, on the session's Secret, counts the session's
	// failed pods, so that an operator restart keeps the count toward
	// spec.restartLimit.
	AnnotationRestarts = "outpost.dev/restarts"
	// AnnotationSuspendedAt, on the session's PersistentVolumeClaim, is
	// when the session was suspended (RFC 3339); resume.snapshotTtlSeconds
	// counts from it. A resume clears it.
	AnnotationSuspendedAt = "outpost.dev/suspended-at"
)

// maxName is the longest DNS-1123 label, which a Pod's name must be to
// serve as its hostname.
const maxName = 63

// PodName is the name of the session's Pod: outpost-<id>-<hash>.
func PodName(sessionID string) string { return objectName("outpost-", sessionID) }

// SecretName is the name of the session's Secret holding its connect token.
func SecretName(sessionID string) string { return objectName("outpost-token-", sessionID) }

// VolumeName is the name of the session's PersistentVolumeClaim
// (FilesystemSnapshot).
func VolumeName(sessionID string) string { return objectName("outpost-work-", sessionID) }

// objectName is prefix, the session id made DNS-safe (lower case, runs of
// other characters as one '-', cut to fit) and 8 hex digits of the FNV-1a
// 32 hash of the raw id: deterministic across operator restarts and
// releases, distinct for ids that differ only in case or punctuation, and
// a DNS-1123 label of at most 63 characters.
func objectName(prefix, sessionID string) string {
	h := fnv.New32a()
	h.Write([]byte(sessionID))
	suffix := fmt.Sprintf("%08x", h.Sum32())
	room := maxName - len(prefix) - len(suffix) - 1
	safe := dnsSafe(sessionID)
	if len(safe) > room {
		safe = strings.TrimRight(safe[:room], "-")
	}
	if safe == "" {
		return prefix + suffix
	}
	return prefix + safe + "-" + suffix
}

// dnsSafe lowercases s, keeps [a-z0-9], turns every run of other characters
// into one '-', and trims '-' from both ends.
func dnsSafe(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	return b.String()
}
