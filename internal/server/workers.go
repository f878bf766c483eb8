package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/store"
)

// Connected workers and orchestrators ("acceptors") are live state: each
// announces itself with a heartbeat (PUT), says goodbye (DELETE) when it
// stops, and is forgotten api.WorkerTTL after its last heartbeat. The
// entries are the store's (store.Worker), so every server on one database
// lists the same acceptors and refuses the same second instance.

// maxWorkersPerOutpost is api.MaxWorkersPerOutpost; tests lower it.
var maxWorkersPerOutpost = api.MaxWorkersPerOutpost

// workers serves the presence of acceptors.
type workers struct {
	s   *Server
	now func() time.Time
	max int // acceptors per outpost
}

// connectedWorkersDesc is the gauge of connected acceptors per outpost.
var connectedWorkersDesc = prometheus.NewDesc("outpost_connected_workers",
	"Workers and orchestrators connected (heartbeating) per outpost and kind.", []string{"outpost", "kind"}, nil)

// newWorkers makes the presence handlers and registers their gauge.
func (s *Server) newWorkers() *workers {
	wk := &workers{s: s, now: s.now, max: maxWorkersPerOutpost}
	s.metrics.MustRegister(wk)
	return wk
}

// apiWorker is a stored entry as the API shows it at now (times in Unix
// seconds).
func apiWorker(w store.Worker, now time.Time) api.Worker {
	return api.Worker{
		AcceptorID: w.AcceptorID, OutpostID: w.OutpostID, WorkerInfo: w.Info, Online: w.ExpiresAt.After(now),
		ConnectedAt: w.ConnectedAt.Unix(), LastSeenAt: w.LastSeenAt.Unix(), ExpiresAt: w.ExpiresAt.Unix(),
		HeartbeatIntervalS: int64(api.WorkerHeartbeatInterval / time.Second),
	}
}

// validateWorkerInfo checks a heartbeat body strictly.
func validateWorkerInfo(in *api.WorkerInfo) error {
	switch in.Kind {
	case api.WorkerKindWorker, api.WorkerKindOrchestrator:
	default:
		return errBadRequest("kind must be %q or %q.", api.WorkerKindWorker, api.WorkerKindOrchestrator)
	}
	short := map[string]string{"hostname": in.Hostname, "version": in.Version, "session_id": in.SessionID, "isolation": in.Isolation}
	for k, v := range short {
		if len(v) > 255 || strings.ContainsFunc(v, isControl) {
			return errBadRequest("%s must be at most 255 characters without control characters.", k)
		}
	}
	if err := api.ValidateInstance(in.Instance); err != nil {
		return errBadRequest("%s.", err)
	}
	if in.PID < 0 || in.PID > 1<<31-1 {
		return errBadRequest("pid must be a number from 0 to 2147483647.")
	}
	if in.MaxSessions < 0 || in.MaxSessions > 100000 || in.ActiveSessions < 0 || in.ActiveSessions > 100000 {
		return errBadRequest("max_sessions and active_sessions must be numbers from 0 to 100000.")
	}
	if err := api.ValidateLabels(in.Labels); err != nil {
		return errBadRequest("labels: %s.", err)
	}
	if c := in.Capabilities; c != nil {
		if len(c.GPUs) > maxGPUs {
			return errBadRequest("capabilities.gpus lists more than %d GPUs.", maxGPUs)
		}
		for _, g := range c.GPUs {
			if len(g.Vendor) > 64 || len(g.Model) > 255 || len(g.DriverVersion) > 64 || len(g.CUDAVersion) > 64 || g.MemoryBytes < 0 ||
				strings.ContainsFunc(g.Model+g.Vendor+g.DriverVersion+g.CUDAVersion, isControl) {
				return errBadRequest("capabilities.gpus holds a GPU with a negative memory_bytes, a field too long or control characters.")
			}
		}
		if len(c.CPUModel) > 255 || len(c.OSVersion) > 255 || c.DiskFreeBytes < 0 {
			return errBadRequest("capabilities.cpu_model and os_version are at most 255 characters; disk_free_bytes must not be negative.")
		}
		fields := map[string]string{"os": c.OS, "arch": c.Arch, "hostname": c.Hostname, "git": c.Git, "chrome_path": c.ChromePath,
			"chrome_version": c.ChromeVersion, "ffmpeg": c.FFmpeg, "remote_version": c.RemoteVersion}
		for k, v := range fields {
			if len(v) > 1024 || strings.ContainsFunc(v, isControl) {
				return errBadRequest("capabilities.%s must be at most 1024 characters without control characters.", k)
			}
		}
		if c.CPUs < 0 || c.MemoryBytes < 0 {
			return errBadRequest("capabilities.cpus and capabilities.memory_bytes must not be negative.")
		}
		if len(c.Tools) > 500 {
			return errBadRequest("capabilities.tools lists more than 500 tools.")
		}
		for _, t := range c.Tools {
			if t == "" || len(t) > 100 || strings.ContainsFunc(t, isControl) {
				return errBadRequest("capabilities.tools holds a name that is empty, longer than 100 characters or has control characters.")
			}
		}
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// heartbeat is PUT /v1/outposts/{outpost}/workers/{acceptor}.
func (wk *workers) heartbeat(w http.ResponseWriter, r *http.Request) error {
	acceptor := r.PathValue("acceptor")
	if err := checkAcceptorID(acceptor); err != nil {
		return err
	}
	o, err := wk.s.resolveOutpost(r.Context(), r.PathValue("outpost"))
	if err != nil {
		return err
	}
	if r.ContentLength > api.MaxWorkerInfoBytes {
		return &httpError{http.StatusRequestEntityTooLarge, api.CodeTooLarge, "A heartbeat body is at most 65536 bytes."}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, api.MaxWorkerInfoBytes+1))
	if err != nil {
		return errBadRequest("The request body could not be read.")
	}
	if len(body) > api.MaxWorkerInfoBytes {
		return &httpError{http.StatusRequestEntityTooLarge, api.CodeTooLarge, "A heartbeat body is at most 65536 bytes."}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var in api.WorkerInfo
	if err := decode(w, r, &in); err != nil {
		return err
	}
	if err := validateWorkerInfo(&in); err != nil {
		return err
	}

	now := wk.now()
	// The store keeps the entry only for the heartbeat that connects the
	// worker (see sqlstore.PutWorker).
	actx := wk.s.audited(r.Context(), audit.WorkerRegister, audit.Object{Kind: audit.ObjectWorker, ID: o.ID + "/" + acceptor},
		map[string]any{"outpost_id": o.ID, "acceptor_id": acceptor, "kind": in.Kind, "hostname": in.Hostname, "instance": in.Instance}, nil)
	e, err := wk.s.store.PutWorker(actx, store.Worker{
		OutpostID: o.ID, AcceptorID: acceptor, Info: in, LastSeenAt: now, ExpiresAt: now.Add(api.WorkerTTL),
	}, wk.max)
	var inUse *store.AcceptorInUseError
	switch {
	case errors.As(err, &inUse):
		h := inUse.Holder.Info
		wk.s.log.Warn("refused a heartbeat: the acceptor id is held by another live process", "outpost", o.Name,
			"acceptor_id", acceptor, "holder_instance", h.Instance, "holder_hostname", h.Hostname, "holder_pid", h.PID,
			"refused_instance", in.Instance, "refused_hostname", in.Hostname, "refused_pid", in.PID)
		return errAcceptorInUse(acceptor, apiWorker(inUse.Holder, now), now)
	case errors.Is(err, store.ErrTooManyWorkers):
		return errConflict("Outpost %q already has %d connected workers, the most one outpost may have.", o.Name, wk.max)
	case errors.Is(err, store.ErrNotFound):
		return errNotFound("Outpost %q does not exist.", r.PathValue("outpost"))
	case err != nil:
		return fmt.Errorf("heartbeat of %s on %s: %w", acceptor, o.ID, err)
	}
	if e.ConnectedAt.Equal(e.LastSeenAt) {
		wk.s.log.Info("worker connected", "outpost", o.Name, "acceptor_id", acceptor, "kind", in.Kind, "hostname", in.Hostname)
		wk.s.emitWorker(r.Context(), api.EventWorkerConnected, e)
	}
	writeJSON(w, http.StatusOK, apiWorker(e, now))
	return nil
}

// errAcceptorInUse is the 409 answering a heartbeat of acceptor from
// another process than the one holding its live entry e.
func errAcceptorInUse(acceptor string, e api.Worker, now time.Time) error {
	holder := e.Kind
	if e.Hostname != "" {
		holder += " on " + e.Hostname
	}
	if e.PID > 0 {
		holder += fmt.Sprintf(" (pid %d)", e.PID)
	}
	return &httpError{http.StatusConflict, api.CodeAcceptorInUse, fmt.Sprintf(
		"Acceptor id %q is in use by another live %s, last seen %ds ago: two workers must never share an identity. "+
			"Give each worker its own acceptor id, or stop the other one (its entry expires %ds after its last heartbeat).",
		acceptor, holder, max(0, now.Unix()-e.LastSeenAt), int64(api.WorkerTTL/time.Second))}
}

// goodbye is DELETE /v1/outposts/{outpost}/workers/{acceptor}. It answers
// 204 whether or not the acceptor was connected, so a goodbye after expiry
// is no error. With ?instance=I it forgets the entry only while I holds
// it, so a process that never held the id cannot remove the holder.
func (wk *workers) goodbye(w http.ResponseWriter, r *http.Request) error {
	acceptor := r.PathValue("acceptor")
	if err := checkAcceptorID(acceptor); err != nil {
		return err
	}
	instance := r.URL.Query().Get("instance")
	if err := api.ValidateInstance(instance); err != nil {
		return errBadRequest("%s.", err)
	}
	o, err := wk.s.resolveOutpost(r.Context(), r.PathValue("outpost"))
	if err != nil {
		return err
	}
	gone, err := wk.s.store.DeleteWorker(r.Context(), o.ID, acceptor, instance, wk.now())
	if err != nil {
		return fmt.Errorf("goodbye of %s on %s: %w", acceptor, o.ID, err)
	}
	if gone {
		wk.s.log.Info("worker said goodbye", "outpost", o.Name, "acceptor_id", acceptor)
		wk.s.emitWorker(r.Context(), api.EventWorkerGone, store.Worker{OutpostID: o.ID, AcceptorID: acceptor})
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// list is GET /v1/outposts/{outpost}/workers: the live acceptors, and
// with ?offline=true those offline for less than store.WorkerOfflineKeep.
func (wk *workers) list(w http.ResponseWriter, r *http.Request) error {
	o, err := wk.s.resolveOutpost(r.Context(), r.PathValue("outpost"))
	if err != nil {
		return err
	}
	return wk.writeList(w, r, o.ID)
}

// listAll is GET /v1/workers: list across outposts, or one with
// ?outpost=; an outpost-limited token sees its own outpost's.
func (wk *workers) listAll(w http.ResponseWriter, r *http.Request) error {
	outpostID, err := wk.s.queueOutpostFilter(r.Context(), r.URL.Query().Get("outpost"))
	if err != nil {
		return err
	}
	return wk.writeList(w, r, outpostID)
}

// writeList answers a list of outpostID's acceptors ("" for every
// outpost's), live ones only unless the query says offline=true.
func (wk *workers) writeList(w http.ResponseWriter, r *http.Request, outpostID string) error {
	offline, err := parseBoolParam(r.URL.Query(), "offline")
	if err != nil {
		return err
	}
	now := wk.now()
	since := now
	if offline {
		since = now.Add(-store.WorkerOfflineKeep)
	}
	entries, err := wk.s.store.RecentWorkers(r.Context(), outpostID, since)
	if err != nil {
		return fmt.Errorf("list workers: %w", err)
	}
	out := api.WorkerList{Items: []api.Worker{}}
	for _, e := range entries {
		out.Items = append(out.Items, apiWorker(e, now))
	}
	out.Total = len(out.Items)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// get is GET /v1/outposts/{outpost}/workers/{acceptor}: one acceptor, live
// or offline for less than store.WorkerOfflineKeep.
func (wk *workers) get(w http.ResponseWriter, r *http.Request) error {
	acceptor := r.PathValue("acceptor")
	if err := checkAcceptorID(acceptor); err != nil {
		return err
	}
	o, err := wk.s.resolveOutpost(r.Context(), r.PathValue("outpost"))
	if err != nil {
		return err
	}
	now := wk.now()
	e, err := wk.s.store.GetWorker(r.Context(), o.ID, acceptor)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !e.ExpiresAt.After(now.Add(-store.WorkerOfflineKeep))) {
		return errNotFound("Worker %q has not been seen on outpost %s in the last %s.", acceptor, o.Name, store.WorkerOfflineKeep)
	}
	if err != nil {
		return fmt.Errorf("get worker %s of %s: %w", acceptor, o.ID, err)
	}
	writeJSON(w, http.StatusOK, apiWorker(e, now))
	return nil
}

// Describe implements prometheus.Collector.
func (wk *workers) Describe(ch chan<- *prometheus.Desc) {
	ch <- connectedWorkersDesc
	ch <- unplaceableDesc
}

// Collect implements prometheus.Collector: the live acceptors per outpost
// and kind, read from the store at each scrape.
func (wk *workers) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), queueScrapeTimeout)
	defer cancel()
	counts, err := wk.s.store.CountWorkers(ctx, wk.now())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(connectedWorkersDesc, err)
		return
	}
	outposts := map[string]bool{}
	for _, c := range counts {
		ch <- prometheus.MustNewConstMetric(connectedWorkersDesc, prometheus.GaugeValue, float64(c.N), wk.s.outpostName(ctx, c.OutpostID), c.Kind)
		outposts[c.OutpostID] = true
	}
	for id := range outposts {
		n, err := wk.s.countUnplaceable(ctx, id)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(unplaceableDesc, err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(unplaceableDesc, prometheus.GaugeValue, float64(n), wk.s.outpostName(ctx, id))
	}
}

// parseBoolParam reads query parameter name: absent, "false" or "true".
func parseBoolParam(q url.Values, name string) (bool, error) {
	switch v := q.Get(name); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, errBadRequest("%s must be true or false, not %q.", name, v)
	}
}
