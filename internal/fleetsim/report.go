package fleetsim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Report is what a simulation measured. Its JSON is `outpost bench fleet
// --json`'s output.
type Report struct {
	Config  Config  `json:"config"`
	Outpost string  `json:"outpost"`
	WallS   float64 `json:"wall_s"`
	// DurationS is how long sessions were created and driven.
	DurationS float64 `json:"duration_s"`
	Workers   struct {
		Requested int `json:"requested"`
		// Watching is how many watch streams were open after the idle
		// phase.
		Watching      int64   `json:"watching"`
		ConnectS      float64 `json:"connect_s"`
		Heartbeats    int64   `json:"heartbeats"`
		ClaimAttempts int64   `json:"claim_attempts"`
		Claims        int64   `json:"claims"`
		Conflicts     int64   `json:"conflicts"`
	} `json:"workers"`
	Sessions struct {
		Requested int   `json:"requested"`
		Created   int64 `json:"created"`
		// Started counts sessions whose remote connected.
		Started      int64 `json:"started"`
		RunningAtEnd int64 `json:"running_at_end"`
		Ended        int64 `json:"ended"`
	} `json:"sessions"`
	Calls   Calls `json:"calls"`
	Remotes struct {
		Connects    int64 `json:"connects"`
		Reconnects  int64 `json:"reconnects"`
		OutputBytes int64 `json:"output_bytes"`
		// ResentByServer counts call frames of calls the remote had run
		// already (answered from its results, not run again).
		ResentByServer int64 `json:"resent_by_server"`
	} `json:"remotes"`
	Latency    Latencies `json:"latency"`
	Throughput struct {
		CallsPerS       float64 `json:"calls_per_s"`
		OutputBytesPerS float64 `json:"output_bytes_per_s"`
		SessionsPerS    float64 `json:"sessions_per_s"`
	} `json:"throughput"`
	Errors struct {
		Total  int64            `json:"total"`
		ByKind map[string]int64 `json:"by_kind"`
		First  []string         `json:"first"`
	} `json:"errors"`
	Server ServerFigures `json:"server"`
	// Simulator is this process's own CPU while busy: on a machine it
	// shares with the server, the cores it took from it.
	Simulator SimulatorFigures `json:"simulator"`
	// Cleanup is what the run removed from the server at its end.
	Cleanup Cleanup `json:"cleanup"`
}

// Config is the run's configuration as reported.
type Config struct {
	// Server is the server's URL, or the replicas' URLs comma-separated.
	Server          string  `json:"server"`
	Workers         int     `json:"workers"`
	Sessions        int     `json:"sessions"`
	CallRate        float64 `json:"call_rate_per_s"`
	OutputBytes     int     `json:"output_bytes"`
	FrameBytes      int     `json:"frame_bytes"`
	Followers       int     `json:"followers"`
	CreateRate      float64 `json:"create_rate_per_s"`
	DurationS       float64 `json:"duration_s"`
	IdleS           float64 `json:"idle_s"`
	ReconnectEveryS float64 `json:"reconnect_every_s"`
}

func configOf(o Options) Config {
	return Config{Server: strings.Join(o.Servers, ","), Workers: o.Workers, Sessions: o.Sessions, CallRate: o.CallRate, OutputBytes: o.OutputBytes,
		FrameBytes: o.FrameBytes, Followers: o.Followers, CreateRate: o.CreateRate, DurationS: o.Duration.Seconds(),
		IdleS: max(o.Idle, 0).Seconds(), ReconnectEveryS: o.ReconnectEvery.Seconds()}
}

// Calls are the exactly-once figures. Every call the agents make carries
// an id; remotes count each id they run.
type Calls struct {
	Issued   int64 `json:"issued"`
	Answered int64 `json:"answered"`
	Failed   int64 `json:"failed"`
	// Executions counts runs at the remotes; Executed distinct call ids.
	Executions int64 `json:"executions"`
	Executed   int64 `json:"executed"`
	// Lost counts calls answered but never run; Duplicated calls run
	// more than once. Both must be 0.
	Lost       int64 `json:"lost"`
	Duplicated int64 `json:"duplicated"`
	// ExecutedUnanswered counts calls that ran but whose caller got an
	// error (a timeout, a connection lost on the way back).
	ExecutedUnanswered int64 `json:"executed_unanswered"`
	// WithoutID counts calls a remote was sent that no agent made.
	WithoutID int64 `json:"without_id"`
}

// Latencies are the measured distributions.
type Latencies struct {
	// Claim is a claim request that won a session, from the later of
	// the claim sent and the session's create request sent to the
	// claim's answer: a claim waiting at the server for a session to
	// exist counts from the moment the session was asked for.
	Claim Dist `json:"claim"`
	// Dispatch is session created → its first call running at the remote.
	Dispatch Dist `json:"dispatch"`
	// Connect is session created → its remote welcomed by the gateway.
	Connect Dist `json:"connect"`
	// ToolCall is a tool call's round trip through the server: request
	// sent → result received.
	ToolCall Dist `json:"tool_call"`
	// ToolCallAllRunning is ToolCall for the calls sent while every
	// session of the run was running: the full rate, the ramp (sessions
	// still being created and claimed) and the drain left out.
	ToolCallAllRunning Dist `json:"tool_call_all_running"`
	// FollowerLag is a result sent by the remote → seen by a follower.
	FollowerLag Dist `json:"follower_lag"`
	Heartbeat   Dist `json:"heartbeat"`
	Create      Dist `json:"create"`
}

// ServerFigures are the server's CPU and memory from its /metrics
// (process_cpu_seconds_total, process_resident_memory_bytes, summed over
// the replicas that answered), sampled before the workers connected
// (before), once they were connected (idle start and end) and at the end
// of the busy phase (busy).
type ServerFigures struct {
	Available bool    `json:"available"`
	RSSBefore int64   `json:"rss_before_bytes"`
	RSSIdle   int64   `json:"rss_idle_bytes"`
	RSSBusy   int64   `json:"rss_busy_bytes"`
	CPUIdleS  float64 `json:"cpu_idle_s"`
	CPUBusyS  float64 `json:"cpu_busy_s"`
	// RSSPerWorker is (idle − before) / workers; RSSPerSession is (busy −
	// idle) / sessions running at the end.
	RSSPerWorker  float64 `json:"rss_per_worker_bytes"`
	RSSPerSession float64 `json:"rss_per_session_bytes"`
	// CPUPerWorker is idle CPU per worker per second, in ms.
	CPUPerWorkerMS float64 `json:"cpu_ms_per_worker_s"`
	// CPUPerCall is busy CPU per answered call, in ms.
	CPUPerCallMS float64 `json:"cpu_ms_per_call"`
	// Replicas are the figures of each metrics URL read (each server
	// given, each replica started with --local), in their order.
	Replicas []ReplicaFigures `json:"replicas,omitempty"`
	// ClaimNextTx counts the server's claim-next store transactions
	// from before the workers connected to the end of the busy phase
	// (outpost_claim_next_transactions_total); ClaimNextCoalesced the
	// claim-next requests it answered without one
	// (outpost_claim_next_coalesced_total). Both -1 for a server
	// without them.
	ClaimNextTx        int64 `json:"claim_next_transactions"`
	ClaimNextCoalesced int64 `json:"claim_next_coalesced"`
	// ClaimNextRequests counts the claim-next requests the server served
	// in the same span (outpost_claim_next_requests_total; a request
	// parked on its wait list counts once); -1 for a server without it.
	ClaimNextRequests int64 `json:"claim_next_requests"`
}

// ReplicaFigures are one metrics URL's figures.
type ReplicaFigures struct {
	URL string `json:"url"`
	// Replica is the replica label of its metrics.
	Replica string `json:"replica,omitempty"`
	// Available is false when its metrics could not be read each time.
	Available bool    `json:"available"`
	RSSIdle   int64   `json:"rss_idle_bytes"`
	RSSBusy   int64   `json:"rss_busy_bytes"`
	CPUBusyS  float64 `json:"cpu_busy_s"`
	// Requests counts the API requests it served during the run
	// (outpost_http_request_duration_seconds_count); Remotes the remotes
	// connected to its gateway at the end of the busy phase; ToolCalls
	// the tool call results it received during the run.
	Requests  int64 `json:"requests"`
	Remotes   int64 `json:"remotes"`
	ToolCalls int64 `json:"tool_calls"`
}

type sample struct {
	ok      bool
	at      time.Time
	cpu     float64
	rss     int64
	replica string
	// requests, remotes and toolCalls are the server's own counters.
	requests, remotes, toolCalls float64
	// claimNext: the server counts claim-next's transactions (tx) and
	// the requests answered without one (shared).
	claimNext          bool
	claimNextTx        float64
	claimNextCoalesced float64
	// claimNextRequests counts claim-next requests, when the server
	// does (hasRequests).
	claimNextRequests float64
	hasRequests       bool
}

// samples are one reading of every metrics URL: each one's and their sum.
type samples struct {
	urls  []string
	each  []sample
	total sample
}

// scrape reads every metrics URL at once; the total is ok when all were.
func (s *sim) scrape(ctx context.Context) samples {
	urls := s.metricsURLs()
	out := samples{urls: urls, each: make([]sample, len(urls))}
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() {
			m, err := scrape(ctx, u, s.opts.Token, s.tr.pick())
			if err != nil && ctx.Err() == nil {
				s.errs.add("metrics", err)
			}
			out.each[i] = m
		})
	}
	wg.Wait()
	out.total = sample{ok: true, at: time.Now()}
	for _, m := range out.each {
		out.total.ok = out.total.ok && m.ok
		out.total.cpu += m.cpu
		out.total.rss += m.rss
		out.total.claimNext = out.total.claimNext || m.claimNext
		out.total.claimNextTx += m.claimNextTx
		out.total.claimNextCoalesced += m.claimNextCoalesced
		out.total.claimNextRequests += m.claimNextRequests
		out.total.hasRequests = out.total.hasRequests || m.hasRequests
	}
	return out
}

// mixedReplicas checks that each metrics URL answered from one replica
// in every reading. A balancer's address answers from any of them, so a
// difference between two readings would be two servers' counters, not a
// cost: a URL that did is marked unreadable in every reading, and the
// error says what to give instead.
func mixedReplicas(all ...*samples) error {
	var errs []error
	for i, u := range all[0].urls {
		var seen []string
		for _, m := range all {
			if r := m.each[i].replica; r != "" && !slices.Contains(seen, r) {
				seen = append(seen, r)
			}
		}
		if len(seen) < 2 {
			continue
		}
		for _, m := range all {
			m.each[i].ok, m.total.ok = false, false
		}
		errs = append(errs, fmt.Errorf("the metrics at %s came from replicas %s in turn (a balancer's address answers from any of them): give each replica's own metrics address in --metrics-url", u, strings.Join(seen, ", ")))
	}
	return errors.Join(errs...)
}

// replicaFigures are each metrics URL's figures: before the workers, at
// the end of the idle phase and of the busy phase.
func replicaFigures(before, idle, busy samples) []ReplicaFigures {
	out := make([]ReplicaFigures, len(busy.urls))
	for i, u := range busy.urls {
		b0, i1, b1 := before.each[i], idle.each[i], busy.each[i]
		f := ReplicaFigures{URL: u, Replica: b1.replica, Available: b0.ok && i1.ok && b1.ok}
		if f.Available {
			f.RSSIdle, f.RSSBusy = i1.rss, b1.rss
			f.CPUBusyS = b1.cpu - i1.cpu
			f.Requests = int64(b1.requests - b0.requests)
			f.Remotes = int64(b1.remotes)
			f.ToolCalls = int64(b1.toolCalls - b0.toolCalls)
		}
		out[i] = f
	}
	return out
}

// scrape reads the process collector's figures from /metrics, trying
// three times: a loaded server may fail one read.
func scrape(ctx context.Context, url, token string, hc *http.Client) (sample, error) {
	var err error
	for try := range 3 {
		var s sample
		if s, err = scrapeOnce(ctx, url, token, hc); err == nil || ctx.Err() != nil {
			return s, err
		}
		if try < 2 && waitCtx(ctx, time.Second) != nil {
			break
		}
	}
	return sample{}, err
}

func scrapeOnce(ctx context.Context, url, token string, hc *http.Client) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return sample{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return sample{}, fmt.Errorf("read the server's metrics at %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return sample{}, fmt.Errorf("read the server's metrics at %s: %s", url, resp.Status)
	}
	s := sample{at: time.Now()}
	var cpu, rss bool
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		labels := ""
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			name = line[:i]
			if j := strings.LastIndexByte(line, '}'); j > i {
				labels, rest = line[i+1:j], line[j+1:]
			}
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		switch name {
		case "process_cpu_seconds_total":
			s.cpu += v
			cpu = true
		case "process_resident_memory_bytes":
			s.rss += int64(v)
			rss = true
			if r := label(labels, "replica"); r != "" {
				if s.replica != "" && s.replica != r {
					r = s.replica + "," + r
				}
				s.replica = r
			}
		case "outpost_http_request_duration_seconds_count":
			s.requests += v
		case "outpost_gateway_remotes":
			s.remotes += v
		case "outpost_tool_calls_total":
			s.toolCalls += v
		case "outpost_claim_next_transactions_total":
			s.claimNextTx += v
			s.claimNext = true
		case "outpost_claim_next_coalesced_total":
			s.claimNextCoalesced += v
		case "outpost_claim_next_requests_total":
			s.claimNextRequests += v
			s.hasRequests = true
		}
	}
	if err := sc.Err(); err != nil {
		return sample{}, fmt.Errorf("read the server's metrics: %w", err)
	}
	if !cpu || !rss {
		return sample{}, fmt.Errorf("the server's metrics have no process_cpu_seconds_total or process_resident_memory_bytes (its platform has no process collector)")
	}
	s.ok = true
	return s, nil
}

// label returns the value of label name in a metric line's labels
// (a="x",b="y"); values holding commas or quotes are not expected here.
func label(labels, name string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

func serverFigures(before, idle0, idle1, busy sample, workers int, sessions, calls int64, idle time.Duration) ServerFigures {
	f := ServerFigures{Available: before.ok && idle0.ok && idle1.ok && busy.ok}
	if !f.Available {
		return f
	}
	f.RSSBefore, f.RSSIdle, f.RSSBusy = before.rss, idle1.rss, busy.rss
	f.ClaimNextTx, f.ClaimNextCoalesced, f.ClaimNextRequests = -1, -1, -1
	if before.hasRequests && busy.hasRequests {
		f.ClaimNextRequests = int64(busy.claimNextRequests - before.claimNextRequests)
	}
	if before.claimNext && busy.claimNext {
		f.ClaimNextTx = int64(busy.claimNextTx - before.claimNextTx)
		f.ClaimNextCoalesced = int64(busy.claimNextCoalesced - before.claimNextCoalesced)
	}
	f.CPUIdleS = idle1.cpu - idle0.cpu
	f.CPUBusyS = busy.cpu - idle1.cpu
	f.RSSPerWorker = float64(idle1.rss-before.rss) / float64(workers)
	if sessions > 0 {
		f.RSSPerSession = float64(busy.rss-idle1.rss) / float64(sessions)
	}
	if d := idle1.at.Sub(idle0.at).Seconds(); idle > 0 && d > 0 {
		f.CPUPerWorkerMS = f.CPUIdleS * 1000 / d / float64(workers)
	}
	if calls > 0 {
		f.CPUPerCallMS = f.CPUBusyS * 1000 / float64(calls)
	}
	return f
}

// Print writes the report for people.
func (r *Report) Print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "Fleet simulation against %s (outpost %s): %d workers, %d sessions at %g calls/s with %d B output, %d followers, %g creates/s, %.0fs\n",
		c.Server, r.Outpost, c.Workers, c.Sessions, c.CallRate, c.OutputBytes, c.Followers, c.CreateRate, r.DurationS)
	fmt.Fprintf(w, "workers:   %d watching (connected in %.1fs), %d heartbeats, %d claims won of %d attempts, %d conflicts\n",
		r.Workers.Watching, r.Workers.ConnectS, r.Workers.Heartbeats, r.Workers.Claims, r.Workers.ClaimAttempts, r.Workers.Conflicts)
	fmt.Fprintf(w, "sessions:  %d created, %d started, %d running at the end, %d ended\n",
		r.Sessions.Created, r.Sessions.Started, r.Sessions.RunningAtEnd, r.Sessions.Ended)
	k := r.Calls
	fmt.Fprintf(w, "calls:     %d issued, %d answered, %d failed; %d executions of %d calls; lost %d, duplicated %d, executed but unanswered %d\n",
		k.Issued, k.Answered, k.Failed, k.Executions, k.Executed, k.Lost, k.Duplicated, k.ExecutedUnanswered)
	fmt.Fprintf(w, "remotes:   %d connects, %d reconnects, %d calls resent by the server, %.1f MiB output\n",
		r.Remotes.Connects, r.Remotes.Reconnects, r.Remotes.ResentByServer, float64(r.Remotes.OutputBytes)/(1<<20))
	fmt.Fprintf(w, "throughput: %.1f calls/s, %.2f MiB/s output, %.2f sessions/s\n",
		r.Throughput.CallsPerS, r.Throughput.OutputBytesPerS/(1<<20), r.Throughput.SessionsPerS)
	fmt.Fprintln(w, "latency (ms)        n      p50      p90      p99      max")
	for _, l := range []struct {
		name string
		d    Dist
	}{
		{"claim", r.Latency.Claim}, {"dispatch", r.Latency.Dispatch}, {"connect", r.Latency.Connect},
		{"tool call", r.Latency.ToolCall}, {" all running", r.Latency.ToolCallAllRunning}, {"follower lag", r.Latency.FollowerLag}, {"heartbeat", r.Latency.Heartbeat}, {"create", r.Latency.Create},
	} {
		if l.name == " all running" && l.d.N == 0 {
			// An empty row would read as a measurement.
			fmt.Fprintf(w, "  %-12s never: %d of %d sessions started, never all at once\n", l.name, r.Sessions.Started, r.Sessions.Requested)
			continue
		}
		fmt.Fprintf(w, "  %-12s %7d %8.2f %8.2f %8.2f %8.2f\n", l.name, l.d.N, l.d.P50, l.d.P90, l.d.P99, l.d.Max)
	}
	s := r.Server
	if s.Available {
		fmt.Fprintf(w, "server:    RSS %.1f MiB before, %.1f MiB idle, %.1f MiB busy: %.1f KiB per worker, %.1f KiB per running session\n",
			mib(s.RSSBefore), mib(s.RSSIdle), mib(s.RSSBusy), s.RSSPerWorker/1024, s.RSSPerSession/1024)
		fmt.Fprintf(w, "           CPU %.2fs idle (%.4f ms per worker-second), %.2fs busy (%.3f ms per call)\n",
			s.CPUIdleS, s.CPUPerWorkerMS, s.CPUBusyS, s.CPUPerCallMS)
		if s.ClaimNextTx >= 0 {
			fmt.Fprintf(w, "           claim-next: %d store transactions, %d requests answered without one\n", s.ClaimNextTx, s.ClaimNextCoalesced)
		}
		if s.ClaimNextRequests >= 0 && r.Sessions.Created > 0 {
			fmt.Fprintf(w, "           claim-next: %d requests, %.1f per session created\n", s.ClaimNextRequests, float64(s.ClaimNextRequests)/float64(r.Sessions.Created))
		}
	} else {
		fmt.Fprintln(w, "server:    no CPU or memory figures (its /metrics could not be read)")
	}
	if m := r.Simulator; m.Available {
		fmt.Fprintf(w, "simulator: CPU %.2fs busy (%.3f ms per call), taken from the server where they share cores\n", m.CPUBusyS, m.CPUPerCallMS)
	}
	if len(s.Replicas) > 1 {
		for _, r := range s.Replicas {
			name := r.Replica
			if name == "" {
				name = r.URL
			}
			if !r.Available {
				fmt.Fprintf(w, "  replica %s: no figures (its /metrics could not be read)\n", name)
				continue
			}
			fmt.Fprintf(w, "  replica %s: RSS %.1f MiB busy, CPU %.2fs busy, %d requests, %d tool calls, %d remotes connected\n",
				name, mib(r.RSSBusy), r.CPUBusyS, r.Requests, r.ToolCalls, r.Remotes)
		}
	}
	fmt.Fprintf(w, "errors:    %d", r.Errors.Total)
	kinds := make([]string, 0, len(r.Errors.ByKind))
	for k := range r.Errors.ByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, " %s=%d", k, r.Errors.ByKind[k])
	}
	fmt.Fprintln(w)
	for _, e := range r.Errors.First {
		fmt.Fprintf(w, "  %s\n", e)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// SimulatorFigures is the simulator's CPU over the busy phase.
type SimulatorFigures struct {
	// Available is false where the process's CPU time cannot be read.
	Available    bool    `json:"available"`
	CPUBusyS     float64 `json:"cpu_busy_s"`
	CPUPerCallMS float64 `json:"cpu_ms_per_call"`
}

// simulatorFigures is the simulator's CPU between busy0 and busy1
// (seconds of this process's CPU time), spread over calls.
func simulatorFigures(busy0, busy1 float64, ok bool, calls int64) SimulatorFigures {
	if !ok {
		return SimulatorFigures{}
	}
	f := SimulatorFigures{Available: true, CPUBusyS: busy1 - busy0}
	if calls > 0 {
		f.CPUPerCallMS = f.CPUBusyS * 1000 / float64(calls)
	}
	return f
}
