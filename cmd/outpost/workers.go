package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
)

// NewCmdWorkers returns `outpost workers`.
func NewCmdWorkers(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List the workers and orchestrators connected to an outpost",
	}
	cmd.AddCommand(NewCmdWorkersList(f, nil))
	return cmd
}

// WorkersListOptions are the settings of `outpost workers list`.
type WorkersListOptions struct {
	f *Factory
	// Outpost is the outpost's name or id (--outpost).
	Outpost string
}

// NewCmdWorkersList returns `outpost workers list`. runF replaces the run
// in tests.
func NewCmdWorkersList(f *Factory, runF func(context.Context, *WorkersListOptions) error) *cobra.Command {
	opts := &WorkersListOptions{f: f}
	cmd := &cobra.Command{
		Use:     "list --outpost NAME-OR-ID",
		Short:   "List an outpost's connected workers with their machines (CPUs, memory, GPUs) and labels",
		Example: "  outpost workers list --outpost gpu-h200\n  outpost workers list --outpost gpu-h200 -o json",
		Args:    exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Outpost == "" {
				return usageErrorf("workers list needs --outpost NAME-OR-ID")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runWorkersList(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Outpost, "outpost", "", "outpost name or id")
	return cmd
}

func runWorkersList(ctx context.Context, opts *WorkersListOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	l, err := c.Workers.List(ctx, opts.Outpost)
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, l)
	}
	t := newTable(f.IO.Out, "ACCEPTOR", "KIND", "HOST", "SESSIONS", "CPUS", "MEMORY", "GPUS", "LABELS")
	for _, w := range l.Items {
		cpus, mem, gpus := "-", "-", "-"
		if caps := w.Capabilities; caps != nil {
			cpus, mem, gpus = strconv.Itoa(caps.CPUs), gibText(caps.MemoryBytes), gpuText(caps.GPUs)
		}
		t.row(w.AcceptorID, w.Kind, w.Hostname, fmt.Sprintf("%d/%d", w.ActiveSessions, w.MaxSessions), cpus, mem, gpus, labelsText(w.Labels))
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
