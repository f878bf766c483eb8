package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// NewCmdWorkers returns `outpost workers`.
func NewCmdWorkers(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List and inspect the workers and orchestrators of the outposts",
	}
	cmd.AddCommand(NewCmdWorkersList(f, nil), NewCmdWorkersGet(f, nil))
	return cmd
}

// WorkersListOptions are the settings of `outpost workers list`.
type WorkersListOptions struct {
	f *Factory
	// Outpost is the outpost's name or id (--outpost); "" lists every
	// outpost's.
	Outpost string
	// Offline adds the machines that went offline in the last day.
	Offline bool
}

// NewCmdWorkersList returns `outpost workers list`. runF replaces the run
// in tests.
func NewCmdWorkersList(f *Factory, runF func(context.Context, *WorkersListOptions) error) *cobra.Command {
	opts := &WorkersListOptions{f: f}
	cmd := &cobra.Command{
		Use:     "list [--outpost NAME-OR-ID] [--offline]",
		Short:   "List the connected workers of every outpost, or of one, with their machines (CPUs, memory, GPUs), version, isolation and labels",
		Example: "  outpost workers list\n  outpost workers list --outpost gpu-h200 --offline\n  outpost workers list -o json",
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runWorkersList(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Outpost, "outpost", "", "only this outpost's workers (name or id)")
	cmd.Flags().BoolVar(&opts.Offline, "offline", false, "also list the workers that went offline in the last day, with when they were last seen")
	return cmd
}

func runWorkersList(ctx context.Context, opts *WorkersListOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	l, err := c.Workers.ListAll(ctx, client.WorkerListOptions{Outpost: opts.Outpost, Offline: opts.Offline})
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, l)
	}
	names := outpostNames(ctx, c)
	now := time.Now()
	t := newTable(f.IO.Out, "OUTPOST", "ACCEPTOR", "KIND", "HOST", "STATE", "SESSIONS", "VERSION", "ISOLATION", "CPUS", "MEMORY", "GPUS", "LABELS")
	for _, w := range l.Items {
		cpus, mem, gpus := "-", "-", "-"
		if caps := w.Capabilities; caps != nil {
			cpus, mem, gpus = strconv.Itoa(caps.CPUs), gibText(caps.MemoryBytes), gpuText(caps.GPUs)
		}
		t.row(nameOr(names, w.OutpostID), w.AcceptorID, w.Kind, w.Hostname, workerState(w, now),
			fmt.Sprintf("%d/%d", w.ActiveSessions, w.MaxSessions), orDash(w.Version), orDash(w.Isolation), cpus, mem, gpus, labelsText(w.Labels))
	}
	return t.flush()
}

// outpostNames maps outpost ids to names, so lists show names; an outpost
// the token cannot list shows its id.
func outpostNames(ctx context.Context, c *client.Client) map[string]string {
	names := map[string]string{}
	if l, err := c.Outposts.List(ctx); err == nil {
		for _, o := range l.Items {
			names[o.Metadata.OutpostID] = o.Spec.Name
		}
	}
	return names
}

func nameOr(names map[string]string, id string) string {
	if n, ok := names[id]; ok {
		return n
	}
	return id
}

// workerState is "online", or "offline, seen 3h ago".
func workerState(w api.Worker, now time.Time) string {
	if w.Online {
		return "online"
	}
	return "offline, seen " + ago(w.LastSeenAt, now)
}

// WorkersGetOptions are the settings of `outpost workers get`.
type WorkersGetOptions struct {
	f *Factory
	// Acceptor is the worker's acceptor id (the argument); Outpost its
	// outpost (--outpost).
	Acceptor, Outpost string
}

// NewCmdWorkersGet returns `outpost workers get`. runF replaces the run in
// tests.
func NewCmdWorkersGet(f *Factory, runF func(context.Context, *WorkersGetOptions) error) *cobra.Command {
	opts := &WorkersGetOptions{f: f}
	cmd := &cobra.Command{
		Use:     "get ACCEPTOR-ID --outpost NAME-OR-ID",
		Short:   "Show one worker: its machine, what it serves, when it was last seen, and the sessions it ran",
		Example: "  outpost workers get worker-box1-3f9a --outpost gpu-h200",
		Args:    exactArgs(1, "ACCEPTOR-ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Acceptor = args[0]
			if err := api.ValidateAcceptorID(opts.Acceptor); err != nil {
				return usageErrorf("%s", err)
			}
			if opts.Outpost == "" {
				return usageErrorf("workers get needs --outpost NAME-OR-ID")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runWorkersGet(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Outpost, "outpost", "", "the worker's outpost (name or id)")
	return cmd
}

func runWorkersGet(ctx context.Context, opts *WorkersGetOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	w, err := c.Workers.Get(ctx, opts.Outpost, opts.Acceptor)
	if err != nil {
		return err
	}
	ran, err := c.Sessions.List(ctx, client.SessionFilter{Outpost: opts.Outpost, Worker: opts.Acceptor, First: 20})
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, struct {
			*api.Worker
			Sessions []api.Session `json:"sessions"`
		}{w, ran.Items})
	}
	now := time.Now()
	out := f.IO.Out
	fmt.Fprintf(out, "Worker:     %s (%s)\n", w.AcceptorID, w.Kind)
	fmt.Fprintf(out, "Outpost:    %s\n", nameOr(outpostNames(ctx, c), w.OutpostID))
	fmt.Fprintf(out, "Host:       %s\n", orDash(w.Hostname))
	fmt.Fprintf(out, "State:      %s (connected %s, last seen %s)\n", map[bool]string{true: "online", false: "offline"}[w.Online],
		ago(w.ConnectedAt, now), ago(w.LastSeenAt, now))
	fmt.Fprintf(out, "Serving:    %d of %d", w.ActiveSessions, w.MaxSessions)
	if w.SessionID != "" {
		fmt.Fprintf(out, " (%s)", w.SessionID)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Version:    %s\n", orDash(w.Version))
	fmt.Fprintf(out, "Isolation:  %s\n", orDash(w.Isolation))
	if caps := w.Capabilities; caps != nil {
		fmt.Fprintf(out, "Machine:    %s/%s, %d CPUs, %s memory, %s disk free\n", caps.OS, caps.Arch, caps.CPUs, gibText(caps.MemoryBytes), gibText(caps.DiskFreeBytes))
		fmt.Fprintf(out, "GPUs:       %s\n", gpuText(caps.GPUs))
	}
	fmt.Fprintf(out, "Labels:     %s\n", labelsText(w.Labels))
	fmt.Fprintln(out)
	if len(ran.Items) == 0 {
		fmt.Fprintln(out, "No sessions ran on it.")
		return nil
	}
	fmt.Fprintln(out, "Sessions it ran, newest first:")
	t := newTable(out, "ID", "STATUS", "CREATED", "TITLE")
	for _, s := range ran.Items {
		t.row(s.Metadata.SessionID, statusText(s.Status.Status, s.Status.StatusDetail), ago(s.Metadata.CreatedAt, now), truncate(s.Spec.Title, 50))
	}
	return t.flush()
}

// gibText writes n bytes in GiB ("-" for unknown).
func gibText(n int64) string {
	if n <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
}

// gpuText writes a machine's GPUs grouped by model: "2 × NVIDIA H200
// (140.4 GiB)"; "-" for none.
func gpuText(gpus []api.GPU) string {
	if len(gpus) == 0 {
		return "-"
	}
	var parts []string
	for i := 0; i < len(gpus); {
		j := i
		for j < len(gpus) && gpus[j].Model == gpus[i].Model && gpus[j].MemoryBytes == gpus[i].MemoryBytes {
			j++
		}
		parts = append(parts, fmt.Sprintf("%d × %s (%s)", j-i, gpus[i].Model, gibText(gpus[i].MemoryBytes)))
		i = j
	}
	return strings.Join(parts, ", ")
}

// labelsText writes labels as k=v,k=v sorted by key; "-" for none.
func labelsText(labels map[string]string) string {
	if len(labels) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}
