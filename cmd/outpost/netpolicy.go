package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/netpolicy"
)

// PolicyFlags are the network policy flags of the commands that set one:
// a JSON file and shorthand rules.
type PolicyFlags struct {
	// File is a JSON api.NetworkPolicy, "-" for standard input.
	File string
	// Hosts and CIDRs add hostname and ipv4/ipv6 rules and enable the
	// policy.
	Hosts, CIDRs []string
}

func (p *PolicyFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&p.File, "network-policy", "", `network policy, a JSON file ({"enabled": true, "allow": [{"hostname": "*.example.test"}, {"ipv4": "10.1.0.0/16", "ports": [443]}]}; - for standard input)`)
	fl.StringArrayVar(&p.Hosts, "allow-host", nil, "allow this host name or *.-glob (repeatable; restricts the network to what is allowed)")
	fl.StringArrayVar(&p.CIDRs, "allow-cidr", nil, "allow this IPv4 or IPv6 address or CIDR range (repeatable; restricts the network to what is allowed)")
}

// given reports whether any of the flags was used.
func (p *PolicyFlags) given() bool {
	return p.File != "" || len(p.Hosts) > 0 || len(p.CIDRs) > 0
}

// policy builds the policy the flags say, checked as the server checks
// it; nil when no flag was given.
func (p *PolicyFlags) policy(f *Factory) (*api.NetworkPolicy, error) {
	if !p.given() {
		return nil, nil
	}
	var pol api.NetworkPolicy
	if p.File != "" {
		var b []byte
		var err error
		if p.File == "-" {
			b, err = readAll(f.IO.In)
		} else {
			b, err = os.ReadFile(p.File)
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("the network policy file %s does not exist (--network-policy)", p.File)
		case err != nil:
			return nil, fmt.Errorf("read the network policy file %s: %w", p.File, err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&pol); err != nil {
			return nil, usageErrorf("%s is not a network policy (JSON with enabled and allow): %v", p.File, err)
		}
		// The decoded policy cannot tell a missing "enabled" from false,
		// so the file's own JSON is checked, as the server checks a
		// request's.
		if err := netpolicy.CheckEnabledKey(b); err != nil {
			return nil, usageErrorf("%s: %v", p.File, err)
		}
	}
	for _, h := range p.Hosts {
		pol.Allow = append(pol.Allow, api.NetworkPolicyRule{Hostname: h})
	}
	for _, c := range p.CIDRs {
		r, err := cidrRule(c)
		if err != nil {
			return nil, err
		}
		pol.Allow = append(pol.Allow, r)
	}
	if len(p.Hosts)+len(p.CIDRs) > 0 {
		pol.Enabled = true
	}
	if err := netpolicy.Validate(pol); err != nil {
		return nil, usageErrorf("%v", err)
	}
	return &pol, nil
}

// cidrRule is the ipv4 or ipv6 rule of an --allow-cidr value.
func cidrRule(s string) (api.NetworkPolicyRule, error) {
	addr, _, _ := strings.Cut(s, "/")
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return api.NetworkPolicyRule{}, usageErrorf("--allow-cidr %q is not an IP address or CIDR range", s)
	}
	if a.Is4() {
		return api.NetworkPolicyRule{IPv4: s}, nil
	}
	return api.NetworkPolicyRule{IPv6: s}, nil
}

// policyText shows a policy in one line: "unrestricted", or its rules.
func policyText(p *api.NetworkPolicy) string {
	if p == nil || !p.Enabled {
		return "unrestricted"
	}
	if len(p.Allow) == 0 {
		return "nothing allowed (restricted, no rules)"
	}
	rules := make([]string, len(p.Allow))
	for i, r := range p.Allow {
		rules[i] = netpolicy.Describe(r)
	}
	return "allow " + strings.Join(rules, "; ")
}

// NewCmdSessionsNetwork returns `outpost sessions network`.
func NewCmdSessionsNetwork(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "network",
		Short: "Change a session's network policy; answer its network access requests",
	}
	cmd.AddCommand(NewCmdSessionsNetworkSet(f, nil), NewCmdSessionsNetworkClear(f, nil),
		NewCmdSessionsNetworkGrant(f, nil), NewCmdSessionsNetworkDeny(f, nil), NewCmdSessionsNetworkList(f, nil))
	return cmd
}

// SessionsNetworkSetOptions are the settings of `outpost sessions network
// set` and `clear`.
type SessionsNetworkSetOptions struct {
	f *Factory
	// ID is the session (the argument).
	ID string
	// Policy is the new policy, from the flags; nil (clear) follows the
	// outpost's.
	Policy *api.NetworkPolicy
	flags  PolicyFlags
}

// NewCmdSessionsNetworkSet returns `outpost sessions network set`. runF
// replaces the run in tests.
func NewCmdSessionsNetworkSet(f *Factory, runF func(context.Context, *SessionsNetworkSetOptions) error) *cobra.Command {
	opts := &SessionsNetworkSetOptions{f: f}
	cmd := &cobra.Command{
		Use:   "set ID [FILE|-]",
		Short: "Replace a session's own network policy",
		Long: `Replace a session's own network policy, from a JSON file (- for standard input)
or --allow-host and --allow-cidr rules. A running session's new connections
follow it at once. Without the network.admin scope the policy may only narrow
its outpost's.`,
		Example: `  outpost sessions network set devin-123 policy.json
  outpost sessions network set devin-123 --allow-host '*.example.test' --allow-cidr 10.1.0.0/16`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if len(args) == 2 {
				if opts.flags.File != "" {
					return usageErrorf("give the policy file as the argument or as --network-policy, not both")
				}
				opts.flags.File = args[1]
			}
			if !opts.flags.given() {
				return usageErrorf("sessions network set needs a policy: a file, --allow-host or --allow-cidr (sessions network clear follows the outpost's again)")
			}
			var err error
			if opts.Policy, err = opts.flags.policy(f); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsNetworkSet(cmd.Context(), opts)
		},
	}
	opts.flags.add(cmd.Flags())
	return cmd
}

// NewCmdSessionsNetworkClear returns `outpost sessions network clear`.
// runF replaces the run in tests.
func NewCmdSessionsNetworkClear(f *Factory, runF func(context.Context, *SessionsNetworkSetOptions) error) *cobra.Command {
	opts := &SessionsNetworkSetOptions{f: f}
	return &cobra.Command{
		Use:     "clear ID",
		Short:   "Remove a session's own network policy: it follows its outpost's again",
		Example: "  outpost sessions network clear devin-123",
		Args:    exactArgs(1, "a session id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsNetworkSet(cmd.Context(), opts)
		},
	}
}

func runSessionsNetworkSet(ctx context.Context, opts *SessionsNetworkSetOptions) error {
	f := opts.f
	c, err := f.Client()
	if err != nil {
		return err
	}
	s, err := c.Sessions.Update(ctx, opts.ID, api.UpdateSessionRequest{NetworkPolicy: opts.Policy})
	if err != nil {
		return err
	}
	if f.JSON() {
		return printJSON(f.IO.Out, s)
	}
	fmt.Fprintf(f.IO.Out, "Session %s: %s\n", s.Metadata.SessionID, sessionPolicyText(s))
	return nil
}

// sessionPolicyText shows a session's effective policy and where it
// comes from.
func sessionPolicyText(s *api.Session) string {
	from := "its outpost's"
	if s.Spec.NetworkPolicyOwn {
		from = "its own"
	}
	return fmt.Sprintf("%s (%s)", policyText(s.Spec.NetworkPolicy), from)
}
