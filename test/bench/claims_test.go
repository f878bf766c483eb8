//go:build !windows

package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/client"
)

// BenchmarkClaims measures the fleet API's claim throughput: 50 concurrent
// claimers (goroutines, each with its own acceptor id, sharing one
// client.Client with a machine token) against a real server process.
//
// Phase "claim": 50×K pending sessions (K = OUTPOST_BENCH_CLAIMS_PER_WORKER,
// default 40) are created first; each claimer then claims its own K
// distinct pending sessions one after another. Phase "churn": each claimer
// releases and re-claims one of its sessions R = 20 times.
//
// Sub-benchmarks: "default-client" uses client.New as the worker does (Go's
// default transport keeps 2 idle connections per host, so most of the 50
// claimers open a new TCP connection per request); "pooled-client" gives
// the client a transport that keeps 100.
func BenchmarkClaims(b *testing.B) {
	const claimers = 50
	k := envInt("OUTPOST_BENCH_CLAIMS_PER_WORKER", 40)
	const rounds = 20
	for _, pooled := range []bool{false, true} {
		name := "default-client"
		if pooled {
			name = "pooled-client"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				c := startCluster(b, "")
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				ids, err := createPending(ctx, c, claimers*k)
				if err != nil {
					b.Fatal(err)
				}
				var opts []client.Option
				if pooled {
					opts = append(opts, client.WithHTTPClient(pooledHTTP(claimers)))
				}
				cl, err := client.New(c.url, c.machine, opts...)
				if err != nil {
					b.Fatal(err)
				}

				// Phase 1: claim distinct pending sessions.
				stats := pgStats(b)
				all, elapsed, err := claimDistinct(ctx, func(int) *client.Client { return cl }, ids, claimers, k)
				if err != nil {
					b.Fatal(err)
				}
				stats(name+" claims", len(all))
				d := summarize(all)
				rate := float64(len(all)) / elapsed.Seconds()

				// Phase 2: release and re-claim one session per claimer.
				var claimLat, releaseLat [claimers][]time.Duration
				errs := make(chan error, claimers)
				startAt := time.Now()
				var wg sync.WaitGroup
				for g := range claimers {
					wg.Go(func() {
						acc := fmt.Sprintf("bench-acceptor-%d", g)
						id := ids[g*k]
						for range rounds {
							t := time.Now()
							if _, err := cl.Queue.Release(ctx, id, acc); err != nil {
								errs <- fmt.Errorf("release %s: %w", id, err)
								return
							}
							t2 := time.Now()
							releaseLat[g] = append(releaseLat[g], t2.Sub(t))
							if _, err := cl.Queue.Claim(ctx, id, acc); err != nil {
								errs <- fmt.Errorf("re-claim %s: %w", id, err)
								return
							}
							claimLat[g] = append(claimLat[g], time.Since(t2))
						}
					})
				}
				wg.Wait()
				churn := time.Since(startAt)
				select {
				case err := <-errs:
					b.Fatal(err)
				default:
				}
				var cl2, rl2 []time.Duration
				for g := range claimers {
					cl2 = append(cl2, claimLat[g]...)
					rl2 = append(rl2, releaseLat[g]...)
				}
				cd, rdist := summarize(cl2), summarize(rl2)
				churnRate := float64(len(cl2)) / churn.Seconds()

				b.ReportMetric(rate, "claims/s")
				report(b, "claim-", d, "ms")
				b.ReportMetric(churnRate, "churn-claims/s")
				b.Logf("%s: %d claimers claimed %d distinct pending sessions in %s: %.0f claims/s", name, claimers, len(all), rd(elapsed), rate)
				b.Logf("  claim latency: %s", d)
				b.Logf("  churn (release + claim, %d rounds each): %.0f claims/s (+ as many releases) in %s", rounds, churnRate, rd(churn))
				b.Logf("  churn claim latency:   %s", cd)
				b.Logf("  churn release latency: %s", rdist)
				b.Logf("SUMMARY claims %s: %.0f claims/s, p50=%s p99=%s with %d concurrent claimers", name, rate, rd(d.p50), rd(d.p99), claimers)
			}
		})
	}
}

// createPending creates n script sessions without steps on the cluster's
// outpost, with a few concurrent creators, and returns their ids.
func createPending(ctx context.Context, c *cluster, n int) ([]string, error) {
	ids := make([]string, n)
	cl, err := client.New(c.url, adminToken, client.WithHTTPClient(pooledHTTP(8)))
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				s, err := cl.Sessions.Create(ctx, apiScript(c.outpost, fmt.Sprintf("pending-%d", i)))
				if err != nil {
					errs <- err
					return
				}
				ids[i] = s.Metadata.SessionID
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	return ids, nil
}

// claimDistinct has claimers goroutines claim k distinct pending sessions
// each of ids (claimer g takes ids[g*k:(g+1)*k] through clientOf(g)) and
// returns every claim's latency and the time the whole phase took.
func claimDistinct(ctx context.Context, clientOf func(g int) *client.Client, ids []string, claimers, k int) ([]time.Duration, time.Duration, error) {
	lat := make([][]time.Duration, claimers)
	errs := make(chan error, claimers)
	startAt := time.Now()
	var wg sync.WaitGroup
	for g := range claimers {
		cl := clientOf(g)
		wg.Go(func() {
			acc := fmt.Sprintf("bench-acceptor-%d", g)
			for _, id := range ids[g*k : (g+1)*k] {
				t := time.Now()
				if _, err := cl.Queue.Claim(ctx, id, acc); err != nil {
					errs <- fmt.Errorf("claim %s: %w", id, err)
					return
				}
				lat[g] = append(lat[g], time.Since(t))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(startAt)
	select {
	case err := <-errs:
		return nil, 0, err
	default:
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	return all, elapsed, nil
}
