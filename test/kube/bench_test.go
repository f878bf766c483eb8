//go:build !windows

package kube

import (
	"math"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/operator/v1alpha1"
)

// BenchmarkQueuedToConnected measures a session's way from created to its
// remote connected, through the operator: the session is created (the
// clock starts before the request), the operator sees it on its watch,
// claims it, makes its Secret and Pod, the test kubelet binds the Pod and
// starts `outpost worker start --session`, which starts the remote, which
// connects (the clock stops at the remote_connected event's time, on the
// server's clock — the same host's). One session at a time, each ended and
// its pod finished before the next; p50, p99 and max are reported as metrics.
//
//	go test ./test/kube -run '^$' -bench QueuedToConnected -benchtime 30x
func BenchmarkQueuedToConnected(b *testing.B) {
	requireOperator(b)
	f := newFixture(b)
	token := f.outpost("bench")
	f.pool("bench", "bench", token, func(p *v1alpha1.OutpostPool) { p.Spec.MaxConcurrentSessions = ptr(int32(4)) })
	f.operator()
	benchConnect(b, f, func(id string) {})
}

// BenchmarkQueuedToConnectedBurst is BenchmarkQueuedToConnected with
// eight sessions created at once, b.N times, on a pool of eight: the
// latencies under load (two cores shared by the API server, the operator,
// the server and eight workers and remotes starting).
func BenchmarkQueuedToConnectedBurst(b *testing.B) {
	requireOperator(b)
	f := newFixture(b)
	token := f.outpost("bench")
	const burst = 8
	f.pool("bench", "bench", token, func(p *v1alpha1.OutpostPool) { p.Spec.MaxConcurrentSessions = ptr(int32(burst)) })
	f.operator()
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		var ids []string
		for range burst {
			ids = append(ids, f.externalSession("bench", "burst"))
		}
		for _, id := range ids {
			lat = append(lat, time.UnixMilli(f.waitConnected(id)).Sub(start))
		}
		for _, id := range ids {
			f.tool(id, "end_session", map[string]any{})
		}
		f.waitNothingLeft(60 * time.Second)
	}
	b.StopTimer()
	report(b, lat)
}

// BenchmarkQueuedToConnectedByHand is the floor of the one above: the
// test claims the session itself as soon as it is created and makes the
// design's Secret and Pod; the rest (kubelet, worker, remote) is the same.
// The difference is the operator's share.
func BenchmarkQueuedToConnectedByHand(b *testing.B) {
	requireCluster(b)
	f := newFixture(b)
	token := f.outpost("bench")
	machine, err := client.New(f.url, token)
	if err != nil {
		b.Fatal(err)
	}
	benchConnect(b, f, func(id string) { f.serveDirect(machine, "kube-bench", id) })
}

// benchConnect runs b.N sessions one after the other (after one not
// counted, to warm up), serve starting each, and reports the latencies.
func benchConnect(b *testing.B, f *fixture, serve func(id string)) {
	once := func() time.Duration {
		start := time.Now()
		id := f.externalSession("bench", "bench")
		serve(id)
		connected := f.waitConnected(id)
		f.tool(id, "end_session", map[string]any{})
		f.waitFor(60*time.Second, "the session's pod to go", func() bool {
			pods, _ := f.cs.CoreV1().Pods(f.ns).List(f.t.Context(), listAll)
			return api.IsFinal(f.session(id).Status.Status) && (pods == nil || len(pods.Items) == 0 || allDone(pods.Items))
		})
		return time.UnixMilli(connected).Sub(start)
	}
	once()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		lat = append(lat, once())
	}
	b.StopTimer()
	report(b, lat)
}

// waitConnected waits for the session's remote_connected event and
// returns its time (Unix ms, the server's clock).
func (f *fixture) waitConnected(id string) int64 {
	f.t.Helper()
	var connected int64
	f.waitFor(60*time.Second, "the remote of "+id+" to connect", func() bool {
		for _, ev := range f.events(id) {
			if ev.Type == api.EventRemoteConnected {
				connected = ev.Time
				return true
			}
		}
		return false
	})
	return connected
}

// report reports the latencies' p50, p99 and max as metrics.
func report(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[max(0, int(math.Ceil(p*float64(len(lat))))-1)] }
	b.ReportMetric(float64(q(0.5).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(q(0.99).Milliseconds()), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
	b.Logf("queued → connected over %d sessions: p50 %s, p99 %s, max %s", len(lat), q(0.5), q(0.99), lat[len(lat)-1])
}

var listAll = metav1.ListOptions{}

// allDone reports whether every pod has finished or is being deleted.
func allDone(pods []corev1.Pod) bool {
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return false
		}
	}
	return true
}
