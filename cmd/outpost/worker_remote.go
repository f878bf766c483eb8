package main

import (
	"github.com/outpost-sh/outpost/api"
	"net/url"

	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/internal/dist"
	"github.com/outpost-sh/outpost/internal/worker"
)

// resolveRemote applies the environment fallbacks of the remote build
// flags — OUTPOST_WORKER_*, then the public contract's DEVIN_WORKER_* —
// and checks them. A flag given wins over both.
func (o *WorkerStartOptions) resolveRemote(fl *pflag.FlagSet, f *Factory) error {
	env := envFallback{fl: fl, getenv: f.Getenv}
	env.string("static-base-url", api.EnvWorkerStaticBaseURL, &o.StaticBaseURL)
	env.string("cache-dir", api.EnvWorkerCacheDir, &o.CacheDir)
	env.string("remote-binary-sha", api.EnvWorkerRemoteSHA, &o.RemoteBinarySHA)
	if o.RemoteBinarySHA != "" {
		if err := dist.CheckID(o.RemoteBinarySHA); err != nil {
			return usageErrorf("--remote-binary-sha: %v", err)
		}
	}
	return checkStaticBaseURL(o.StaticBaseURL)
}

// checkStaticBaseURL refuses a --static-base-url (of worker start or
// orchestrate) that is not an absolute http or https URL; "" is the
// default.
func checkStaticBaseURL(base string) error {
	if base == "" {
		return nil
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErrorf("--static-base-url %q must be an absolute http:// or https:// URL, such as https://outpost.example.com/dist/", base)
	}
	return nil
}

// withRemote returns wo with the remote build settings of o.
func (o *WorkerStartOptions) withRemote(wo worker.Options) worker.Options {
	wo.StaticBaseURL, wo.CacheDir, wo.RemoteBinarySHA = o.StaticBaseURL, o.CacheDir, o.RemoteBinarySHA
	return wo
}
