package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/netpolicy"
)

// The network policy editor of the outpost and session pages. The form
// holds the policy's "enabled" checkbox and one row per rule (kind,
// address, ports) plus a blank row to add one; a row's "remove" checkbox
// drops it. Saving sends the whole policy to the API, which decides what
// the user's token may do (widening needs network.admin) and whose refusal
// the page shows above the form, which keeps what the user typed.

// Rule kinds as the form names them: the three forms of api.NetworkPolicyRule.
const (
	ruleHostname = "hostname"
	ruleIPv4     = "ipv4"
	ruleIPv6     = "ipv6"
)

// ruleKinds are the choices of a row's kind.
var ruleKinds = []string{ruleHostname, ruleIPv4, ruleIPv6}

// ruleRow is one rule as the form shows and sends it.
type ruleRow struct {
	Kind, Value, Ports string
}

// policyEditor is what the policy section of a page shows.
type policyEditor struct {
	// Action is where the form posts.
	Action string
	// Enabled and Rules are the form's values: the stored policy's, or
	// what the user sent when the API refused it.
	Enabled bool
	Rules   []ruleRow
	// Effective is the policy that applies (nil: unrestricted); Stored
	// is the outpost's as stored, which may hold rules while disabled.
	Effective, Stored *api.NetworkPolicy
	// CanWrite shows the form; otherwise the page shows the policy only.
	CanWrite bool
	// Locked keeps the policy enabled in the form: lifting a restriction
	// widens it, which the viewer's token may not.
	Locked bool
	// Bound is the policy a session's own must lie within, its outpost's,
	// when the viewer may not widen it; nil when nothing bounds it.
	Bound *api.NetworkPolicy
	// Session marks a session's editor; Own that the session has a policy
	// of its own (it can go back to following its outpost's).
	Session, Own bool
	// Open unfolds the form: the user is editing it.
	Open bool
	// CSRF is the page's form value (set by the template's withCSRF).
	CSRF string
}

// Kinds lists the rule kinds, for the template.
func (policyEditor) Kinds() []string { return ruleKinds }

// rowsOf is the form's rows of a policy's rules.
func rowsOf(p *api.NetworkPolicy) []ruleRow {
	if p == nil {
		return nil
	}
	rows := make([]ruleRow, 0, len(p.Allow))
	for _, r := range p.Allow {
		row := ruleRow{}
		switch {
		case r.Hostname != "":
			row.Kind, row.Value = ruleHostname, r.Hostname
		case r.IPv4 != "":
			row.Kind, row.Value = ruleIPv4, r.IPv4
		default:
			row.Kind, row.Value = ruleIPv6, r.IPv6
		}
		ports := make([]string, len(r.Ports))
		for i, p := range r.Ports {
			ports[i] = strconv.Itoa(p)
		}
		row.Ports = strings.Join(ports, ", ")
		rows = append(rows, row)
	}
	return rows
}

// policyForm reads the editor's form: the rows the user kept (blank rows
// and rows marked for removal left out) and the policy they say. The
// policy is nil when a row is wrong; the error says which row (counted as
// the page shows them) and what is wrong, and rows are still returned, so
// the form shows what the user sent.
func policyForm(r *http.Request) (*api.NetworkPolicy, []ruleRow, error) {
	if err := r.ParseForm(); err != nil {
		return nil, nil, errors.New("the form could not be read")
	}
	kinds, values, ports := r.PostForm["kind"], r.PostForm["value"], r.PostForm["ports"]
	if len(kinds) != len(values) || len(kinds) != len(ports) {
		return nil, nil, errors.New("the form's rules are incomplete; reload the page and try again")
	}
	// One blank row beyond the most a policy holds, so that a full policy's
	// form (with its blank row) is still read.
	if len(kinds) > api.MaxNetworkPolicyRules+1 {
		return nil, nil, fmt.Errorf("a network policy has at most %d rules", api.MaxNetworkPolicyRules)
	}
	removed := map[int]bool{}
	for _, v := range r.PostForm["remove"] {
		if i, err := strconv.Atoi(v); err == nil {
			removed[i] = true
		}
	}
	p := &api.NetworkPolicy{Enabled: r.PostFormValue("enabled") != "", Allow: []api.NetworkPolicyRule{}}
	var rows []ruleRow
	var firstErr error
	for i := range kinds {
		row := ruleRow{Kind: kinds[i], Value: strings.TrimSpace(values[i]), Ports: strings.TrimSpace(ports[i])}
		if removed[i] || row.Value == "" && row.Ports == "" {
			continue
		}
		rows = append(rows, row)
		rule, err := ruleOf(row)
		if err == nil {
			err = netpolicy.Validate(api.NetworkPolicy{Allow: []api.NetworkPolicyRule{rule}})
		}
		if err != nil {
			if firstErr == nil {
				// The validation names the one rule it saw "allow[0]"; the
				// user counts the rows on the page.
				msg := strings.TrimPrefix(err.Error(), "network policy allow[0]: ")
				firstErr = fmt.Errorf("rule %d (%s): %s", len(rows), row.Value, msg)
			}
			continue
		}
		p.Allow = append(p.Allow, rule)
	}
	if firstErr != nil {
		return nil, rows, firstErr
	}
	return p, rows, nil
}

// ruleOf is the rule a row says.
func ruleOf(row ruleRow) (api.NetworkPolicyRule, error) {
	var rule api.NetworkPolicyRule
	switch row.Kind {
	case ruleHostname:
		rule.Hostname = row.Value
	case ruleIPv4:
		rule.IPv4 = row.Value
	case ruleIPv6:
		rule.IPv6 = row.Value
	default:
		return rule, fmt.Errorf("choose a kind: hostname, ipv4 or ipv6")
	}
	if row.Value == "" {
		return rule, errors.New("ports need a host name or an address range")
	}
	for _, f := range strings.FieldsFunc(row.Ports, func(c rune) bool { return c == ',' || c == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return rule, fmt.Errorf("port %q is not a number", f)
		}
		rule.Ports = append(rule.Ports, n)
	}
	return rule, nil
}

// viewer is what the signed-in token may do; an error reading it leaves
// every ability off, so the page shows the policy read-only.
func (h *Handler) viewer(r *http.Request) api.WhoAmI {
	var me api.WhoAmI
	if err := h.call(r, "GET", "/v1/whoami", nil, &me); err != nil {
		return api.WhoAmI{}
	}
	return me
}

// enabled reports whether p restricts.
func enabled(p *api.NetworkPolicy) bool { return p != nil && p.Enabled }

// ---- the outpost page

func (h *Handler) outpostPage(w http.ResponseWriter, r *http.Request) {
	notice := ""
	if r.URL.Query().Get("saved") != "" {
		notice = "The network policy is saved; the outpost's sessions that follow it use it for their new connections."
	}
	switch r.URL.Query().Get("secret") {
	case "saved":
		notice = "The secret is stored. Sessions created from now on that name it in use_secrets get the new value."
	case "deleted":
		notice = "The secret is deleted. Sessions created before keep the value they were given."
	}
	h.renderOutpost(w, r, http.StatusOK, "", notice, nil)
}

// renderOutpost renders the outpost page; sent, when not nil, is the
// policy form the API refused, shown again as the user sent it.
func (h *Handler) renderOutpost(w http.ResponseWriter, r *http.Request, status int, errMsg, notice string, sent *policyEditor) {
	name := r.PathValue("outpost")
	var o api.Outpost
	if err := h.call(r, "GET", "/v1/outposts/"+url.PathEscape(name), nil, &o); err != nil {
		h.failAPI(w, r, err)
		return
	}
	me := h.viewer(r)
	ed := policyEditor{
		Action:    "/ui/outposts/" + url.PathEscape(o.Spec.Name) + "/network-policy",
		Enabled:   enabled(o.Spec.NetworkPolicy),
		Rules:     rowsOf(o.Spec.NetworkPolicy),
		Effective: netpolicy.Effective(o.Spec.NetworkPolicy, nil),
		Stored:    o.Spec.NetworkPolicy,
		// The API lets only unlimited orchestrator tokens change outposts.
		CanWrite: api.HasScope(me.Scopes, api.ScopeOrchestrator) && me.OutpostID == "",
		Locked:   enabled(o.Spec.NetworkPolicy) && !api.HasScope(me.Scopes, api.ScopeNetworkAdmin),
	}
	if sent != nil {
		ed.Enabled, ed.Rules, ed.Open = sent.Enabled || ed.Locked, sent.Rules, true
	}
	var wl api.WorkerList
	workers := -1
	if err := h.call(r, "GET", "/v1/outposts/"+url.PathEscape(o.Metadata.OutpostID)+"/workers", nil, &wl); err == nil {
		workers = len(wl.Items)
	}
	h.render(w, r, status, "outpost", page{Title: "Outpost " + o.Spec.Name, Nav: "outposts", Error: errMsg, Notice: notice, Data: map[string]any{
		"O": o, "Policy": ed, "Workers": workers, "Secrets": h.outpostSecrets(r, o, me),
	}})
}

// setOutpostPolicy saves the outpost page's policy form.
func (h *Handler) setOutpostPolicy(w http.ResponseWriter, r *http.Request) {
	p, rows, err := policyForm(r)
	sent := &policyEditor{Enabled: r.PostFormValue("enabled") != "", Rules: rows}
	if err != nil {
		h.renderOutpost(w, r, http.StatusBadRequest, "Check the network policy: "+err.Error()+".", "", sent)
		return
	}
	var o api.Outpost
	path := "/v1/outposts/" + url.PathEscape(r.PathValue("outpost"))
	if err := h.call(r, "PATCH", path, api.UpdateOutpostRequest{NetworkPolicy: p}, &o); err != nil {
		if ae, ok := err.(*apiError); ok && ae.Status == http.StatusUnauthorized {
			h.failAPI(w, r, err)
			return
		}
		h.renderOutpost(w, r, statusOf(err), errText(err), "", sent)
		return
	}
	http.Redirect(w, r, "/ui/outposts/"+url.PathEscape(o.Spec.Name)+"?saved=1", http.StatusSeeOther)
}

// ---- the session page

// sessionPolicy is the policy section of session s's page.
func (h *Handler) sessionPolicy(r *http.Request, s api.Session, final bool, sent *policyEditor) policyEditor {
	ed := policyEditor{
		Action:    "/ui/sessions/" + url.PathEscape(s.Metadata.SessionID) + "/network-policy",
		Enabled:   enabled(s.Spec.NetworkPolicy),
		Rules:     rowsOf(s.Spec.NetworkPolicy),
		Effective: s.Spec.NetworkPolicy,
		Session:   true,
		Own:       s.Spec.NetworkPolicyOwn,
	}
	me := h.viewer(r)
	ed.CanWrite = !final && api.HasScope(me.Scopes, api.ScopeSessionsWrite)
	if ed.CanWrite && !api.HasScope(me.Scopes, api.ScopeNetworkAdmin) {
		// Without network.admin a session's own policy only narrows its
		// outpost's: the page says which that is and offers no way to
		// lift it. An outpost this token cannot read bounds it as well;
		// the API's refusal says how.
		var o api.Outpost
		if err := h.call(r, "GET", "/v1/outposts/"+url.PathEscape(s.Spec.Outpost), nil, &o); err == nil && enabled(o.Spec.NetworkPolicy) {
			// Locked, the form can only say "restricted", even for a
			// session someone with network.admin left unrestricted.
			ed.Bound, ed.Locked, ed.Enabled = o.Spec.NetworkPolicy, true, true
		}
	}
	if sent != nil {
		ed.Enabled, ed.Rules, ed.Open = sent.Enabled || ed.Locked, sent.Rules, true
	}
	return ed
}

// setSessionPolicy saves the session page's policy form, or with
// "follow" drops the session's own policy so it follows its outpost's.
func (h *Handler) setSessionPolicy(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("session")
	req := api.UpdateSessionRequest{}
	var sent *policyEditor // nil: following the outpost's, nothing typed to keep
	if r.PostFormValue("follow") == "" {
		p, rows, err := policyForm(r)
		sent = &policyEditor{Enabled: r.PostFormValue("enabled") != "", Rules: rows}
		if err != nil {
			h.renderSessionWith(w, r, http.StatusBadRequest, "Check the network policy: "+err.Error()+".", "", sent)
			return
		}
		req.NetworkPolicy = p
	}
	if err := h.call(r, "PATCH", "/v1/sessions/"+url.PathEscape(id), req, nil); err != nil {
		if ae, ok := err.(*apiError); ok && ae.Status == http.StatusUnauthorized {
			h.failAPI(w, r, err)
			return
		}
		h.renderSessionWith(w, r, statusOf(err), errText(err), "", sent)
		return
	}
	http.Redirect(w, r, "/ui/sessions/"+url.PathEscape(id)+"?policy=saved#network", http.StatusSeeOther)
}

// policyRules lists a policy's rules for the read-only view.
func policyRules(p *api.NetworkPolicy) []string {
	if p == nil {
		return nil
	}
	out := make([]string, len(p.Allow))
	for i, r := range p.Allow {
		out[i] = netpolicy.Describe(r)
	}
	return slices.Clip(out)
}
