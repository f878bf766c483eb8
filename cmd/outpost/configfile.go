package main

import (
	"context"
	"log/slog"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/internal/cliconfig"
)

// configFlagUsage is the help of --config, the same on every command that
// has it.
const configFlagUsage = "YAML file of settings, each key a flag's name and each value what the flag takes (a list for a repeatable flag); a flag given or its environment variable beats the file"

// addConfigFlag adds --config FILE to a long-running command.
func addConfigFlag(fl *pflag.FlagSet, path *string) {
	fl.StringVar(path, "config", "", configFlagUsage)
}

// applyConfigFile gives the flags of fl not set on the command line the
// values of the config file at path ("": none). It runs before a
// command's resolve, whose environment fallbacks then still win over the
// file. A mistake in the file is a usage error.
func applyConfigFile(fl *pflag.FlagSet, path string) error {
	if path == "" {
		return nil
	}
	if err := cliconfig.Apply(fl, path); err != nil {
		return usageError{err}
	}
	return nil
}

// runWithSettings is the RunE of a long-running command whose options o
// come from flags, the environment and a config file: it applies the file
// at *configFile, resolves the settings (the environment, defaults and
// checks), records in *overridden the file's keys the environment
// replaced, then runs run, or runF in tests.
func runWithSettings[O any](o *O, configFile *string, overridden *[]string, resolve func(*pflag.FlagSet) error,
	runF, run func(context.Context, *O) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := applyConfigFile(cmd.Flags(), *configFile); err != nil {
			return err
		}
		if err := resolve(cmd.Flags()); err != nil {
			return err
		}
		*overridden = overriddenSettings(cmd.Flags(), *configFile)
		if runF != nil {
			return runF(cmd.Context(), o)
		}
		return run(cmd.Context(), o)
	}
}

// given reports whether flag name of fl was set on the command line or by
// the config file.
func given(fl *pflag.FlagSet, name string) bool {
	return fl.Changed(name) || cliconfig.FromFile(fl, name)
}

// warnOverridden logs the config file's settings that an environment
// variable replaced.
func warnOverridden(log *slog.Logger, path string, names []string) {
	for _, n := range names {
		log.Warn("the environment overrides a setting of the config file", "config", path, "key", n)
	}
}

// overriddenSettings returns the keys of the config file at path whose
// values the environment replaced in resolve; nil without a file.
func overriddenSettings(fl *pflag.FlagSet, path string) []string {
	if path == "" {
		return nil
	}
	return cliconfig.Overridden(fl)
}

// systemConfigDir holds the config files, environment files and token
// files of the systemd units (deploy/systemd). Worker sessions never see
// it.
const systemConfigDir = "/etc/outpost"
