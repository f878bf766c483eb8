package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/outpost-sh/outpost/api"
)

func (h *Handler) home(w http.ResponseWriter, r *http.Request) {
	if token(r) == "" {
		http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/ui/sessions", http.StatusSeeOther)
}

func (h *Handler) signinPage(w http.ResponseWriter, r *http.Request) {
	p := page{Title: "Sign in"}
	if r.URL.Query().Get("expired") != "" {
		p.Notice = "Your token is no longer valid. Sign in again."
	}
	// The server's single sign-on sends its outcome as a code, never as
	// text, so no link can make this page say what another site wants.
	switch r.URL.Query().Get("sso") {
	case "":
	case "refused":
		p.Error = "The identity provider did not admit you (or your email domain is not allowed here)."
	case "norole":
		p.Error = "You signed in, but you have no role here yet: ask an admin to grant you one (outpost roles grant)."
	case "expired":
		p.Error = "That sign-in was not started here or has expired. Sign in again."
	case "unavailable":
		p.Error = "The identity provider does not answer. Try again later, or sign in with an API token."
	default:
		p.Error = "Signing in through the identity provider failed. Try again."
	}
	h.render(w, r, http.StatusOK, "signin", p)
}

func (h *Handler) signin(w http.ResponseWriter, r *http.Request) {
	tok := strings.TrimSpace(r.PostFormValue("token"))
	next := signinNext(r.PostFormValue("next"))
	if tok == "" {
		h.render(w, r, http.StatusBadRequest, "signin", page{Title: "Sign in", Error: "Enter an API token.", Data: signinData(next)})
		return
	}
	err := h.callToken(r.Context(), r, tok, "GET", "/v1/outposts", nil, nil)
	if ae, ok := err.(*apiError); ok && ae.Status == http.StatusUnauthorized {
		// The server's sentence says what is wrong with it (not valid,
		// revoked, expired); saying "not valid" before it doubled it.
		msg := ae.Message
		if msg == "" {
			msg = "This token is not valid."
		}
		if h.signIn != nil {
			h.signIn(r, tok, msg)
		}
		h.render(w, r, http.StatusUnauthorized, "signin", page{Title: "Sign in", Error: msg, Data: signinData(next)})
		return
	} else if err != nil && !ok {
		h.failAPI(w, r, err)
		return
	}
	if h.signIn != nil {
		h.signIn(r, tok, "")
	}
	h.setCookie(w, r, tok, 0)
	h.clearSigninCookie(w, r)
	if next == "" {
		next = "/ui/sessions"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// signinNext is the page to go to after signing in, from the sign-in
// form's next field: only the device approval page (with its code), the
// one page a signed-out visitor is sent to sign in from with a link to
// come back to; anything else is "" (the sessions page), so the field
// cannot send a visitor elsewhere.
func signinNext(next string) string {
	if next == api.DeviceVerifyPath || strings.HasPrefix(next, api.DeviceVerifyPath+"?") {
		return next
	}
	return ""
}

// signinData is the sign-in page's data: the page to return to, if any.
func signinData(next string) map[string]any {
	return map[string]any{"Next": next}
}

func (h *Handler) signout(w http.ResponseWriter, r *http.Request) {
	// A single sign-on's token dies with the sign-out; the server refuses
	// (and keeps) a pasted API token, which is not the UI's to revoke.
	if err := h.call(r, "DELETE", "/v1/auth/session", nil, nil); err != nil {
		h.log.Debug("web: sign-out kept the token", "err", err)
	}
	h.clearCookie(w, r)
	http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
}

// ---- outposts

// outposts lists every outpost the user may see, following the list's
// pages.
func (h *Handler) outposts(r *http.Request) (api.OutpostList, error) {
	all := api.OutpostList{Items: []api.Outpost{}}
	after := ""
	for {
		q := url.Values{"first": {"200"}}
		if after != "" {
			q.Set("after", after)
		}
		var page api.OutpostList
		if err := h.call(r, "GET", "/v1/outposts?"+q.Encode(), nil, &page); err != nil {
			return all, err
		}
		all.Items = append(all.Items, page.Items...)
		all.Total = page.Total
		if !page.HasNextPage || page.Cursor == "" || page.Cursor == after {
			return all, nil
		}
		after = page.Cursor
	}
}

func (h *Handler) outpostsPage(w http.ResponseWriter, r *http.Request) {
	h.renderOutposts(w, r, http.StatusOK, "", "", api.CreateOutpostRequest{Platform: api.PlatformLinux})
}

func (h *Handler) renderOutposts(w http.ResponseWriter, r *http.Request, status int, errMsg, notice string, form api.CreateOutpostRequest) {
	list, err := h.outposts(r)
	if err != nil {
		h.failAPI(w, r, err)
		return
	}
	// Workers of every outpost, with those offline in the last day; when
	// the list cannot be read the counts show "?" rather than failing the
	// page.
	counts := map[string]int{}
	var connected []outpostWorker
	names := map[string]string{}
	for _, o := range list.Items {
		names[o.Metadata.OutpostID] = o.Spec.Name
		counts[o.Metadata.OutpostID] = 0
	}
	var wl api.WorkerList
	if err := h.call(r, "GET", "/v1/workers?offline=true", nil, &wl); err != nil {
		for id := range counts {
			counts[id] = -1
		}
	}
	for _, wk := range wl.Items {
		if wk.Online {
			counts[wk.OutpostID]++
		}
		connected = append(connected, outpostWorker{Outpost: names[wk.OutpostID], Worker: wk})
	}
	h.render(w, r, status, "outposts", page{Title: "Outposts", Nav: "outposts", Error: errMsg, Notice: notice, Data: map[string]any{
		"Outposts": list.Items, "Form": form, "Platforms": []string{api.PlatformLinux, api.PlatformMacOS, api.PlatformWindows},
		"WorkerCounts": counts, "Workers": connected,
	}})
}

// outpostWorker is a worker with its outpost's name.
type outpostWorker struct {
	Outpost string
	api.Worker
}

func (h *Handler) createOutpost(w http.ResponseWriter, r *http.Request) {
	req := api.CreateOutpostRequest{
		Name:        strings.TrimSpace(r.PostFormValue("name")),
		Platform:    r.PostFormValue("platform"),
		Description: r.PostFormValue("description"),
	}
	var o api.Outpost
	if err := h.call(r, "POST", "/v1/outposts", req, &o); err != nil {
		h.renderOutposts(w, r, statusOf(err), errText(err), "", req)
		return
	}
	http.Redirect(w, r, "/ui/outposts?created="+url.QueryEscape(o.Spec.Name), http.StatusSeeOther)
}

func (h *Handler) deleteOutpost(w http.ResponseWriter, r *http.Request) {
	path := "/v1/outposts/" + url.PathEscape(r.PathValue("outpost"))
	if r.PostFormValue("force") != "" {
		path += "?force=true"
	}
	if err := h.call(r, "DELETE", path, nil, nil); err != nil {
		h.renderOutposts(w, r, statusOf(err), errText(err), "", api.CreateOutpostRequest{Platform: api.PlatformLinux})
		return
	}
	http.Redirect(w, r, "/ui/outposts", http.StatusSeeOther)
}

// ---- sessions

var statuses = []string{api.StatusNew, api.StatusClaimed, api.StatusRunning, api.StatusSuspended, api.StatusResuming, api.StatusExit, api.StatusError}

func (h *Handler) sessionsPage(w http.ResponseWriter, r *http.Request) {
	in := r.URL.Query()
	q := url.Values{}
	for _, k := range []string{"outpost", "status", "q", "worker", "cursor"} {
		if v := strings.TrimSpace(in.Get(k)); v != "" {
			q.Set(k, v)
		}
	}
	q.Set("first", "50")
	var list api.SessionList
	if err := h.call(r, "GET", "/v1/sessions?"+q.Encode(), nil, &list); err != nil {
		h.failAPI(w, r, err)
		return
	}
	outposts, _ := h.outposts(r)
	next := ""
	if list.HasNextPage && list.Cursor != "" {
		nq := url.Values{}
		for _, k := range []string{"outpost", "status", "q", "worker"} {
			if v := q.Get(k); v != "" {
				nq.Set(k, v)
			}
		}
		nq.Set("cursor", list.Cursor)
		next = "/ui/sessions?" + nq.Encode()
	}
	h.render(w, r, http.StatusOK, "sessions", page{Title: "Sessions", Nav: "sessions", Data: map[string]any{
		"Sessions": list.Items, "Total": list.Total, "Next": next, "Paged": q.Get("cursor") != "",
		"Outposts": outposts.Items, "Statuses": statuses,
		"Outpost": q.Get("outpost"), "Status": q.Get("status"), "Q": q.Get("q"), "Worker": q.Get("worker"),
	}})
}

// newSessionForm is what the new-session form holds. Secrets are
// write-only and never rendered back.
type newSessionForm struct {
	Outpost, Title, Prompt, Kind, Model, Steps, Repos string
	// UseSecrets names stored secrets of the outpost, separated by
	// spaces or commas.
	UseSecrets string
}

func (h *Handler) newSessionPage(w http.ResponseWriter, r *http.Request) {
	f := newSessionForm{Kind: api.AgentScript, Outpost: r.URL.Query().Get("outpost"),
		Steps: `[
  {"tool": "exec", "args": {"command": "echo hello from outpost"}}
]`}
	h.renderNewSession(w, r, http.StatusOK, "", f)
}

func (h *Handler) renderNewSession(w http.ResponseWriter, r *http.Request, status int, errMsg string, f newSessionForm) {
	outposts, err := h.outposts(r)
	if err != nil {
		h.failAPI(w, r, err)
		return
	}
	h.render(w, r, status, "newsession", page{Title: "New session", Nav: "new", Error: errMsg, Data: map[string]any{
		"Outposts": outposts.Items, "Form": f,
	}})
}

func (h *Handler) createSession(w http.ResponseWriter, r *http.Request) {
	f := newSessionForm{
		Outpost: r.PostFormValue("outpost"), Title: r.PostFormValue("title"), Prompt: r.PostFormValue("prompt"),
		Kind: r.PostFormValue("kind"), Model: strings.TrimSpace(r.PostFormValue("model")), Steps: r.PostFormValue("steps"),
		Repos: r.PostFormValue("repos"), UseSecrets: r.PostFormValue("use_secrets"),
	}
	req := api.CreateSessionRequest{Outpost: f.Outpost, Title: f.Title, Prompt: f.Prompt, Agent: api.Agent{Kind: f.Kind},
		UseSecrets: strings.FieldsFunc(f.UseSecrets, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })}
	switch f.Kind {
	case api.AgentScript:
		if strings.TrimSpace(f.Steps) != "" {
			if err := json.Unmarshal([]byte(f.Steps), &req.Agent.Steps); err != nil {
				h.renderNewSession(w, r, http.StatusBadRequest, "The steps are not a JSON array of {\"tool\", \"args\"} objects: "+err.Error(), f)
				return
			}
		}
	case api.AgentLLM:
		req.Agent.Model = f.Model
		req.Agent.Interactive = r.PostFormValue("interactive") != ""
	case api.AgentExternal:
		// An outside agent drives it over MCP; its page shows how.
	default:
		h.renderNewSession(w, r, http.StatusBadRequest, "Choose an agent kind: script, llm or external.", f)
		return
	}
	repos, err := parseRepos(f.Repos)
	if err != nil {
		h.renderNewSession(w, r, http.StatusBadRequest, "Check the repositories: "+err.Error()+".", f)
		return
	}
	req.Repos = repos
	secrets, err := parseSecrets(r.PostFormValue("secrets"))
	if err != nil {
		h.renderNewSession(w, r, http.StatusBadRequest, "Check the secrets: "+err.Error()+".", f)
		return
	}
	req.Secrets = secrets
	var s api.Session
	if err := h.call(r, "POST", "/v1/sessions", req, &s); err != nil {
		h.renderNewSession(w, r, statusOf(err), errText(err), f)
		return
	}
	http.Redirect(w, r, "/ui/sessions/"+url.PathEscape(s.Metadata.SessionID), http.StatusSeeOther)
}

// parseRepos reads one repository a line: its URL, then optionally the
// ref to check out and the directory name under repos/, separated by
// spaces. Blank lines and # comments are skipped.
func parseRepos(text string) ([]api.Repo, error) {
	var out []api.Repo
	for i, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) > 3 {
			return nil, fmt.Errorf("repository line %d has more than a URL, a ref and a name", i+1)
		}
		repo := api.Repo{URL: f[0]}
		if len(f) > 1 {
			repo.Ref = f[1]
		}
		if len(f) > 2 {
			repo.Name = f[2]
		}
		out = append(out, repo)
	}
	return out, nil
}

// parseSecrets reads KEY=VALUE lines; blank lines and # comments are skipped.
func parseSecrets(text string) (map[string]string, error) {
	var m map[string]string
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("secret line %d is not KEY=VALUE", i+1)
		}
		if m == nil {
			m = map[string]string{}
		}
		m[k] = v
	}
	return m, nil
}

// transcriptPage is how many events the session page shows at once.
const transcriptPage = 500

func (h *Handler) sessionPage(w http.ResponseWriter, r *http.Request) {
	notice := ""
	if r.URL.Query().Get("policy") == "saved" {
		notice = "The network policy is saved; the session's new connections follow it."
	}
	h.renderSession(w, r, http.StatusOK, "", notice)
}

func (h *Handler) renderSession(w http.ResponseWriter, r *http.Request, status int, errMsg, notice string) {
	h.renderSessionWith(w, r, status, errMsg, notice, nil)
}

// renderSessionWith renders the session page; sent, when not nil, is the
// network policy form the API refused, shown again as the user sent it.
func (h *Handler) renderSessionWith(w http.ResponseWriter, r *http.Request, status int, errMsg, notice string, sent *policyEditor) {
	id := r.PathValue("session")
	base := "/v1/sessions/" + url.PathEscape(id)
	// The events are read before the session: the page follows live from
	// its last event, so a status that changed between the two reads must
	// show in the session read (newer) rather than only among the events
	// (the page's status would keep the older one, and the live feed
	// would start after the change).
	// Without ?after the page shows the newest events and follows live;
	// with it, the 500 events after that sequence number.
	var events []api.Event
	live := true
	afterParam := r.URL.Query().Get("after")
	if after, err := strconv.ParseInt(afterParam, 10, 64); afterParam != "" && err == nil && after >= 0 {
		var list api.EventList
		if err := h.call(r, "GET", fmt.Sprintf("%s/events?after=%d&limit=%d", base, after, transcriptPage), nil, &list); err != nil {
			h.failAPI(w, r, err)
			return
		}
		events = list.Items
		live = !list.HasNextPage
	} else {
		var err error
		if events, err = h.newestEvents(r, base); err != nil {
			h.failAPI(w, r, err)
			return
		}
	}
	var s api.Session
	if err := h.call(r, "GET", base, nil, &s); err != nil {
		h.failAPI(w, r, err)
		return
	}
	last, earlier := int64(0), ""
	if n := len(events); n > 0 {
		last = events[n-1].Seq
		if first := events[0].Seq; first > 1 {
			earlier = fmt.Sprintf("/ui/sessions/%s?after=%d", url.PathEscape(id), max(0, first-1-transcriptPage))
		}
	}
	var arts api.ArtifactList
	_ = h.call(r, "GET", base+"/artifacts", nil, &arts)
	final := api.IsFinal(s.Status.Status)
	// The requests waiting for an answer come from the API, not from the
	// events on this page: a request older than them still gets buttons.
	var requests api.NetworkRequestList
	if !final {
		_ = h.call(r, "GET", base+"/network-requests", nil, &requests)
	}
	// Likewise the tool calls that approval rules hold.
	var approvals api.ApprovalList
	if !final {
		_ = h.call(r, "GET", base+"/approvals?state="+api.ApprovalPending, nil, &approvals)
	}
	// The sessions forked from this one, the newest first.
	var forks api.SessionList
	_ = h.call(r, "GET", "/v1/sessions?first=50&forked_from="+url.QueryEscape(id), nil, &forks)
	// A session whose artifacts the retention policy deleted shows none
	// inline.
	plan := scriptPlan(s.Spec)
	items := buildTranscript(events, transcriptOptions{Final: final, NoMedia: s.Status.ArtifactsPrunedAt != nil, Plan: plan, End: live})
	h.render(w, r, status, "session", page{Title: titleOf(s), Nav: "sessions", Error: errMsg, Notice: notice, Data: map[string]any{
		"S": s, "Items": items, "Last": last, "Live": live, "Earlier": earlier, "Artifacts": arts.Items,
		"Final": final, "LLM": s.Spec.Agent.Kind == api.AgentLLM, "Requests": requests.Items, "Plan": plan,
		"Approvals": approvals.Items,
		"Forks":     forks.Items,
		"Policy":    h.sessionPolicy(r, s, final, sent),
		"External":  h.externalFor(r, s, final),
		// The live desktop shows while a session that has or asked for
		// one can still run.
		"Desktop": !final && (s.Spec.Desktop != nil || (s.Status.Capabilities != nil && s.Status.Capabilities.Desktop)),
	}})
}

// grantRequest and denyRequest answer a network access request of the
// session; the session page shows the outcome.
func (h *Handler) grantRequest(w http.ResponseWriter, r *http.Request) {
	h.answerRequest(w, r, "grant", api.NetworkGrantRequest{Scope: r.PostFormValue("scope")})
}

func (h *Handler) denyRequest(w http.ResponseWriter, r *http.Request) {
	h.answerRequest(w, r, "deny", api.NetworkDenyRequest{Reason: strings.TrimSpace(r.PostFormValue("reason"))})
}

func (h *Handler) answerRequest(w http.ResponseWriter, r *http.Request, answer string, body any) {
	id := r.PathValue("session")
	path := "/v1/sessions/" + url.PathEscape(id) + "/network-requests/" + url.PathEscape(r.PathValue("request")) + "/" + answer
	if err := h.call(r, "POST", path, body, nil); err != nil {
		h.renderSession(w, r, statusOf(err), errText(err), "")
		return
	}
	http.Redirect(w, r, "/ui/sessions/"+url.PathEscape(id), http.StatusSeeOther)
}

// approveCall and denyCall decide a tool call that approval rules hold;
// the session page shows the outcome.
func (h *Handler) approveCall(w http.ResponseWriter, r *http.Request) { h.decideCall(w, r, "approve") }
func (h *Handler) denyCall(w http.ResponseWriter, r *http.Request)    { h.decideCall(w, r, "deny") }

func (h *Handler) decideCall(w http.ResponseWriter, r *http.Request, decision string) {
	id := r.PathValue("session")
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq < 1 {
		h.renderSession(w, r, http.StatusBadRequest, "There is no such tool call: its number must be a whole number from 1.", "")
		return
	}
	path := fmt.Sprintf("/v1/sessions/%s/calls/%d/%s", url.PathEscape(id), seq, decision)
	body := api.ApprovalDecisionRequest{Reason: strings.TrimSpace(r.PostFormValue("reason"))}
	if err := h.call(r, "POST", path, body, nil); err != nil {
		h.renderSession(w, r, statusOf(err), errText(err), "")
		return
	}
	http.Redirect(w, r, "/ui/sessions/"+url.PathEscape(id)+"#call-"+strconv.FormatInt(seq, 10), http.StatusSeeOther)
}

// newestEvents returns the last transcriptPage events of a session.
func (h *Handler) newestEvents(r *http.Request, base string) ([]api.Event, error) {
	var list api.EventList
	err := h.call(r, "GET", fmt.Sprintf("%s/events?tail=%d", base, transcriptPage), nil, &list)
	return list.Items, err
}

func titleOf(s api.Session) string {
	if s.Spec.Title != "" {
		return s.Spec.Title
	}
	return s.Metadata.SessionID
}

func (h *Handler) sessionEvents(w http.ResponseWriter, r *http.Request) {
	q := url.Values{}
	if v := r.URL.Query().Get("after"); v != "" {
		q.Set("after", v)
	}
	r.Header.Set("Accept", "text/event-stream")
	h.proxy(&stepWriter{ResponseWriter: w}, r, "/v1/sessions/"+url.PathEscape(r.PathValue("session"))+"/events", q, "Accept", "Last-Event-ID")
}

func (h *Handler) artifact(w http.ResponseWriter, r *http.Request) {
	h.proxy(w, r, "/v1/sessions/"+url.PathEscape(r.PathValue("session"))+"/artifacts/"+url.PathEscape(r.PathValue("name")), nil, "Range", "If-Range")
}

func (h *Handler) terminate(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("session")
	req := api.TerminateRequest{Reason: strings.TrimSpace(r.PostFormValue("reason"))}
	if err := h.call(r, "POST", "/v1/sessions/"+url.PathEscape(id)+"/terminate", req, nil); err != nil {
		h.renderSession(w, r, statusOf(err), errText(err), "")
		return
	}
	http.Redirect(w, r, "/ui/sessions/"+url.PathEscape(id), http.StatusSeeOther)
}

// rerun creates a new session with this one's spec and secrets and shows
// the new session's page.
func (h *Handler) rerun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("session")
	var s api.Session
	if err := h.call(r, "POST", "/v1/sessions/"+url.PathEscape(id)+"/rerun", nil, &s); err != nil {
		h.renderSession(w, r, statusOf(err), errText(err), "")
		return
	}
	http.Redirect(w, r, "/ui/sessions/"+url.PathEscape(s.Metadata.SessionID), http.StatusSeeOther)
}

// fork posts the session's fork with the form's count and instruction;
// the session page then lists the new sessions under Forks.
func (h *Handler) fork(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("session")
	count, err := strconv.Atoi(strings.TrimSpace(r.PostFormValue("count")))
	if err != nil {
		h.renderSession(w, r, http.StatusBadRequest, fmt.Sprintf("Give the number of sessions to fork into, 1 to %d.", api.MaxForkCount), "")
		return
	}
	req := api.ForkRequest{Count: count, Prompt: strings.TrimSpace(r.PostFormValue("prompt"))}
	if err := h.call(r, "POST", "/v1/sessions/"+url.PathEscape(id)+"/fork", req, nil); err != nil {
		h.renderSession(w, r, statusOf(err), errText(err), "")
		return
	}
	http.Redirect(w, r, "/ui/sessions/"+url.PathEscape(id), http.StatusSeeOther)
}

// suspend and resume post the session's suspend or resume; the session
// page shows the outcome.
func (h *Handler) suspend(w http.ResponseWriter, r *http.Request) { h.sessionAction(w, r, "suspend") }
func (h *Handler) resume(w http.ResponseWriter, r *http.Request)  { h.sessionAction(w, r, "resume") }

func (h *Handler) sessionAction(w http.ResponseWriter, r *http.Request, action string) {
	id := r.PathValue("session")
	if err := h.call(r, "POST", "/v1/sessions/"+url.PathEscape(id)+"/"+action, nil, nil); err != nil {
		h.renderSession(w, r, statusOf(err), errText(err), "")
		return
	}
	http.Redirect(w, r, "/ui/sessions/"+url.PathEscape(id), http.StatusSeeOther)
}

func (h *Handler) message(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("session")
	text := r.PostFormValue("text")
	if strings.TrimSpace(text) == "" {
		h.renderSession(w, r, http.StatusBadRequest, "Write a message first.", "")
		return
	}
	if err := h.call(r, "POST", "/v1/sessions/"+url.PathEscape(id)+"/messages", api.MessageRequest{Text: text}, nil); err != nil {
		h.renderSession(w, r, statusOf(err), errText(err), "")
		return
	}
	http.Redirect(w, r, "/ui/sessions/"+url.PathEscape(id), http.StatusSeeOther)
}

// ---- tokens

func (h *Handler) tokensPage(w http.ResponseWriter, r *http.Request) {
	h.renderTokens(w, r, http.StatusOK, "", nil)
}

func (h *Handler) renderTokens(w http.ResponseWriter, r *http.Request, status int, errMsg string, created *api.CreateTokenResponse) {
	var list api.TokenList
	if err := h.call(r, "GET", "/v1/tokens", nil, &list); err != nil {
		h.failAPI(w, r, err)
		return
	}
	outposts, _ := h.outposts(r)
	// A token limited to an outpost makes only tokens limited to it, so
	// its form offers no unlimited one.
	var me api.WhoAmI
	_ = h.call(r, "GET", "/v1/whoami", nil, &me)
	h.render(w, r, status, "tokens", page{Title: "Tokens", Nav: "tokens", Error: errMsg, Data: map[string]any{
		"Tokens": list.Items, "Scopes": api.Scopes, "Outposts": outposts.Items, "Created": created,
		"Limited": me.OutpostID != "",
	}})
}

func (h *Handler) createToken(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	req := api.CreateTokenRequest{Name: strings.TrimSpace(r.PostFormValue("name")), Scopes: r.PostForm["scope"], Outpost: r.PostFormValue("outpost")}
	if v := strings.TrimSpace(r.PostFormValue("expires_in_h")); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			h.renderTokens(w, r, http.StatusBadRequest, "Expiry must be a whole number of hours.", nil)
			return
		}
		req.ExpiresInS = n * 3600
	}
	var created api.CreateTokenResponse
	if err := h.call(r, "POST", "/v1/tokens", req, &created); err != nil {
		h.renderTokens(w, r, statusOf(err), errText(err), nil)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	h.renderTokens(w, r, http.StatusCreated, "", &created)
}

func (h *Handler) revokeToken(w http.ResponseWriter, r *http.Request) {
	if err := h.call(r, "DELETE", "/v1/tokens/"+url.PathEscape(r.PathValue("token")), nil, nil); err != nil {
		h.renderTokens(w, r, statusOf(err), errText(err), nil)
		return
	}
	http.Redirect(w, r, "/ui/tokens", http.StatusSeeOther)
}

// workerPage shows one worker, online or offline for less than a day: its
// machine, what it serves, and the sessions it ran.
func (h *Handler) workerPage(w http.ResponseWriter, r *http.Request) {
	outpost, acceptor := r.PathValue("outpost"), r.PathValue("acceptor")
	var o api.Outpost
	if err := h.call(r, "GET", "/v1/outposts/"+url.PathEscape(outpost), nil, &o); err != nil {
		h.failAPI(w, r, err)
		return
	}
	var wk api.Worker
	if err := h.call(r, "GET", "/v1/outposts/"+url.PathEscape(o.Metadata.OutpostID)+"/workers/"+url.PathEscape(acceptor), nil, &wk); err != nil {
		h.failAPI(w, r, err)
		return
	}
	q := url.Values{"outpost": {o.Metadata.OutpostID}, "worker": {acceptor}, "first": {"50"}}
	var ran api.SessionList
	if err := h.call(r, "GET", "/v1/sessions?"+q.Encode(), nil, &ran); err != nil {
		h.failAPI(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "worker", page{Title: "Worker " + acceptor, Nav: "outposts", Data: map[string]any{
		"Outpost": o, "Worker": wk, "Sessions": ran.Items, "Total": ran.Total,
	}})
}
