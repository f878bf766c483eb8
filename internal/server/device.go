package server

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/store"
)

// The numbers that make user codes hard to guess; docs/api.md (Device
// login) works them out.
const (
	// userCodeAlphabet has no vowels (no words form) and none of the
	// letters people confuse (no I, O, U, Y; no digits at all).
	userCodeAlphabet = "BCDFGHJKLMNPQRSTVWXZ"
	// userCodeLen is the letters of a user code: 20^8 ≈ 2.6e10 codes.
	userCodeLen = 8
	// deviceMissLimit is how many wrong user codes one person (a
	// user, whichever of their tokens or sign-ins sends them; else the
	// service account's token) may send in deviceMissWindow before they
	// are refused (429) until the window ends; deviceMissIPLimit is as
	// many from one source address, whoever sends them, so that many
	// tokens do not buy many guesses. Only a code that could be one (8
	// letters of the alphabet) counts: a typo that cannot match any code
	// (a look-alike letter, a digit, a letter too few or too many) is
	// refused as malformed and costs nothing. At most deviceMaxPending of
	// 20^8 codes are pending, so one guess hits with odds of at most
	// 1000/2.56e10 ≈ 3.9e-8: 20 a quarter hour per person is about 7.5e-5
	// a day, 60 per address about 2.2e-4 a day, while a person who
	// mistypes a real code twenty times is plainly not reading it.
	deviceMissLimit   = 20
	deviceMissIPLimit = 60
	deviceMissWindow  = 15 * time.Minute
	// deviceMaxPending caps the grants pending at once: the code
	// endpoint is open, so this bounds what it may store, and the odds
	// of a guess hitting some pending code.
	deviceMaxPending = 1000
	// deviceSlowDown is what each poll that came too soon adds to the
	// interval (RFC 8628 §3.5).
	deviceSlowDown = 5 * time.Second
	// devicePruneAfter keeps an expired grant so that its client is told
	// expired_token rather than invalid_grant.
	devicePruneAfter = time.Hour
)

// newUserCode returns a random user code, XXXX-XXXX.
func newUserCode() string {
	b := make([]byte, userCodeLen)
	out := make([]byte, 0, userCodeLen+1)
	for i := range userCodeLen {
		// Rejection sampling keeps every letter equally likely.
		for {
			if _, err := rand.Read(b[i : i+1]); err != nil {
				panic(err) // crypto/rand does not fail on supported systems
			}
			if b[i] < 240 { // 240 = 12 * 20
				break
			}
		}
		if i == userCodeLen/2 {
			out = append(out, '-')
		}
		out = append(out, userCodeAlphabet[int(b[i])%len(userCodeAlphabet)])
	}
	return string(out)
}

// normalizeUserCode turns what a person typed into the stored form: case,
// spaces and dashes do not matter. ok is false when it cannot be a user
// code at all.
func normalizeUserCode(s string) (code string, ok bool) {
	var letters []byte
	for _, r := range strings.ToUpper(s) {
		switch {
		case r == '-' || unicode.IsSpace(r):
		case r < utf8.RuneSelf && strings.IndexByte(userCodeAlphabet, byte(r)) >= 0:
			letters = append(letters, byte(r))
		default:
			return "", false
		}
		if len(letters) > userCodeLen {
			return "", false
		}
	}
	if len(letters) != userCodeLen {
		return "", false
	}
	return string(letters[:userCodeLen/2]) + "-" + string(letters[userCodeLen/2:]), true
}

// oauthError is an answer of the OAuth endpoints (RFC 6749 §5.2).
type oauthError struct {
	status int
	code   string
	desc   string
}

func (e *oauthError) Error() string { return e.code + ": " + e.desc }

// writeOAuth answers an OAuth endpoint; no answer may be cached (RFC 6749
// §5.1).
func writeOAuth(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	writeJSON(w, status, v)
}

// oauth wraps an OAuth endpoint: an *oauthError is answered in OAuth's
// shape, anything else is logged and answered as server_error.
func (s *Server) oauth(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		var oe *oauthError
		if !errors.As(err, &oe) {
			s.log.Error("device grant", "path", r.URL.Path, "err", err)
			oe = &oauthError{http.StatusInternalServerError, "server_error", "Something went wrong on the server; try again."}
		}
		writeOAuth(w, oe.status, api.OAuthError{Error: oe.code, ErrorDescription: oe.desc})
	}
}

// oauthForm reads an OAuth request's parameters: form-encoded, as OAuth
// clients send them, or a JSON object of strings.
func oauthForm(w http.ResponseWriter, r *http.Request) (url.Values, error) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	bad := func(format string, args ...any) error {
		return &oauthError{http.StatusBadRequest, api.OAuthInvalidRequest, fmt.Sprintf(format, args...)}
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return nil, bad("The form could not be read: %v.", err)
		}
		return r.PostForm, nil
	case "application/json":
		var m map[string]string
		dec := json.NewDecoder(r.Body)
		if err := dec.Decode(&m); err != nil {
			return nil, bad("The body must be a JSON object of strings.")
		}
		v := url.Values{}
		for k, x := range m {
			v.Set(k, x)
		}
		return v, nil
	default:
		return nil, &oauthError{http.StatusUnsupportedMediaType, api.OAuthInvalidRequest,
			"Send the parameters form-encoded (application/x-www-form-urlencoded) or as JSON."}
	}
}

// printable reports whether s is at most max characters with no control
// characters, fit to show an approver.
func printable(s string, max int) bool {
	return utf8.ValidString(s) && utf8.RuneCountInString(s) <= max && !strings.ContainsFunc(s, unicode.IsControl)
}

// deviceCode starts a grant: POST /v1/auth/device/code.
func (s *Server) deviceCode(w http.ResponseWriter, r *http.Request) error {
	form, err := oauthForm(w, r)
	if err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return &oauthError{http.StatusBadRequest, api.OAuthInvalidRequest, fmt.Sprintf(format, args...)}
	}
	req := api.DeviceCodeRequest{ClientID: form.Get("client_id"), ClientName: form.Get("client_name"),
		Scope: form.Get("scope"), Outpost: form.Get("outpost")}
	if req.ClientID == "" || !printable(req.ClientID, 100) {
		return bad("client_id is required: up to 100 printable characters naming the client.")
	}
	if !printable(req.ClientName, 200) {
		return bad("client_name must be at most 200 printable characters.")
	}
	if !printable(req.Outpost, 200) {
		return bad("outpost must be an outpost's name.")
	}
	scopes := strings.Fields(req.Scope)
	for _, sc := range scopes {
		if !slices.Contains(api.Scopes, sc) {
			return &oauthError{http.StatusBadRequest, api.OAuthInvalidScope,
				fmt.Sprintf("Scope %q is unknown; scopes are %s.", errorText("%s", sc), strings.Join(api.Scopes, ", "))}
		}
	}
	secret := newSecret("opd_")
	now := s.now()
	g := store.DeviceGrant{
		DeviceHash: hashSecret(secret), ClientID: req.ClientID, ClientName: req.ClientName,
		Scopes: slices.Compact(slices.Sorted(slices.Values(scopes))), Outpost: req.Outpost, SourceIP: sourceIP(r),
		CreatedAt: now, ExpiresAt: now.Add(s.opts.DeviceCodeTTL), Interval: s.opts.DevicePollInterval, State: store.DevicePending,
	}
	if g.Scopes == nil {
		g.Scopes = []string{}
	}
	// A user code taken already (1 in 2.6e10 per pending code) is
	// drawn again.
	for range 5 {
		g.UserCode = newUserCode()
		err = s.store.CreateDeviceGrant(r.Context(), g, now.Add(-devicePruneAfter), deviceMaxPending)
		if !errors.Is(err, store.ErrConflict) {
			break
		}
	}
	if errors.Is(err, store.ErrTooManyDeviceGrants) {
		return &oauthError{http.StatusServiceUnavailable, api.OAuthTemporarilyUnavailable,
			fmt.Sprintf("%d device logins are waiting for approval already; try again in a few minutes.", deviceMaxPending)}
	}
	if err != nil {
		return fmt.Errorf("create device grant: %w", err)
	}
	s.log.Info("device login started", "client_id", g.ClientID, "client_name", g.ClientName, "scopes", g.Scopes,
		"outpost", g.Outpost, "source_ip", g.SourceIP, "user_code", g.UserCode)
	verify := s.publicURL + api.DeviceVerifyPath
	writeOAuth(w, http.StatusOK, api.DeviceCodeResponse{
		DeviceCode: secret, UserCode: g.UserCode,
		VerificationURI: verify, VerificationURIComplete: verify + "?user_code=" + url.QueryEscape(g.UserCode),
		ExpiresIn: int(s.opts.DeviceCodeTTL / time.Second), Interval: int(max(s.opts.DevicePollInterval/time.Second, 1)),
	})
	return nil
}

// deviceToken is polled for the token: POST /v1/auth/device/token. Each
// poll is one transaction on the grant's row, so two pollers (or two
// replicas) cannot both receive the token, and the interval holds across
// replicas.
func (s *Server) deviceToken(w http.ResponseWriter, r *http.Request) error {
	form, err := oauthForm(w, r)
	if err != nil {
		return err
	}
	if gt := form.Get("grant_type"); gt != api.DeviceGrantType {
		return &oauthError{http.StatusBadRequest, api.OAuthUnsupportedGrantType,
			fmt.Sprintf("grant_type must be %s.", api.DeviceGrantType)}
	}
	code := form.Get("device_code")
	if code == "" {
		return &oauthError{http.StatusBadRequest, api.OAuthInvalidRequest, "device_code is required."}
	}
	now := s.now()
	var answer *oauthError
	var secret string
	var minted store.Token
	err = s.store.UpdateDeviceGrant(r.Context(), hashSecret(code), func(g store.DeviceGrant) (store.DeviceUpdate, error) {
		answer, secret = nil, ""
		if cid := form.Get("client_id"); cid != "" && cid != g.ClientID {
			return store.DeviceUpdate{}, &oauthError{http.StatusBadRequest, api.OAuthInvalidGrant, "This device code was issued to another client."}
		}
		switch {
		case g.State == store.DeviceUsed:
			return store.DeviceUpdate{}, &oauthError{http.StatusBadRequest, api.OAuthInvalidGrant, "This device code was used already; start again."}
		case g.State == store.DeviceDenied:
			return store.DeviceUpdate{}, &oauthError{http.StatusBadRequest, api.OAuthAccessDenied, "The request was denied."}
		case !now.Before(g.ExpiresAt):
			return store.DeviceUpdate{}, &oauthError{http.StatusBadRequest, api.OAuthExpiredToken, "The device code expired before anyone approved it; start again."}
		case g.State == store.DevicePending:
			if g.LastPollAt != nil && now.Sub(*g.LastPollAt) < g.Interval {
				g.Interval += deviceSlowDown
				answer = &oauthError{http.StatusBadRequest, api.OAuthSlowDown,
					fmt.Sprintf("Polled too soon; wait %d seconds between polls.", int(g.Interval/time.Second))}
			} else {
				answer = &oauthError{http.StatusBadRequest, api.OAuthAuthorizationPending, "Waiting for a person to approve the request."}
			}
			g.LastPollAt = &now
			return store.DeviceUpdate{Grant: g}, nil
		}
		// Approved: mint the token the approval decided, with the
		// grant's last write.
		secret = newSecret("opt_")
		minted = g.Token
		minted.ID, minted.Hash, minted.CreatedAt = newID("tok_"), hashSecret(secret), now
		g.State, g.TokenID, g.LastPollAt = store.DeviceUsed, minted.ID, &now
		return store.DeviceUpdate{Grant: g, Token: &minted}, nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return &oauthError{http.StatusBadRequest, api.OAuthInvalidGrant, "This device code is not valid; start again."}
	}
	if err != nil {
		return err
	}
	if answer != nil {
		return answer
	}
	s.log.Info("device login completed: token issued", "token", minted.ID, "scopes", minted.Scopes, "outpost", minted.OutpostID)
	resp := api.DeviceTokenResponse{AccessToken: secret, TokenType: "Bearer", Scope: strings.Join(minted.Scopes, " "),
		TokenID: minted.ID, OutpostID: minted.OutpostID}
	if minted.ExpiresAt != nil {
		resp.ExpiresIn = max(int64(minted.ExpiresAt.Sub(now)/time.Second), 1)
	}
	writeOAuth(w, http.StatusOK, resp)
	return nil
}

// deviceMissKey is what wrong user codes count against: a key of the
// device_misses table, with its limit and whom the refusal names.
type deviceMissKey struct {
	key   string
	limit int
	who   string
}

// deviceMissKeys are the counters a wrong user code of the request of ctx
// goes against: its person's (a user's, across their tokens; else the
// token's) and its source address's.
func deviceMissKeys(ctx context.Context) []deviceMissKey {
	p := principalFrom(ctx)
	person := deviceMissKey{key: p.tokenID, limit: deviceMissLimit, who: "This token"}
	if p.User != nil && p.User.ID != "" {
		person = deviceMissKey{key: "user:" + p.User.ID, limit: deviceMissLimit, who: "You"}
	}
	keys := []deviceMissKey{person}
	if ip, _ := ctx.Value(sourceIPKey{}).(string); ip != "" {
		keys = append(keys, deviceMissKey{key: "ip:" + ip, limit: deviceMissIPLimit, who: "Your address (" + ip + ")"})
	}
	return keys
}

// pendingGrant finds the grant a person names by user code. A wrong code
// that could be one counts against the caller's person and address: past
// their limits in deviceMissWindow the caller is refused without a
// lookup. A malformed code is refused without counting.
func (s *Server) pendingGrant(ctx context.Context, typed string) (store.DeviceGrant, error) {
	now := s.now()
	keys := deviceMissKeys(ctx)
	for _, k := range keys {
		n, err := s.store.DeviceMisses(ctx, k.key, now, deviceMissWindow)
		if err != nil {
			return store.DeviceGrant{}, fmt.Errorf("device misses: %w", err)
		}
		if n >= k.limit {
			return store.DeviceGrant{}, &httpError{http.StatusTooManyRequests, api.CodeTooManyRequests,
				fmt.Sprintf("%s sent %d wrong user codes in %d minutes; wait before trying again.", k.who, n, int(deviceMissWindow/time.Minute))}
		}
	}
	code, ok := normalizeUserCode(typed)
	if !ok {
		return store.DeviceGrant{}, errBadRequest("%q is not a user code: a user code is 8 letters from %s, as XXXX-XXXX (case, spaces and dashes do not matter); check it against the machine's screen.", typed, userCodeAlphabet)
	}
	g, err := s.store.DeviceGrantByUserCode(ctx, code)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !now.Before(g.ExpiresAt)) {
		for _, k := range keys {
			if _, err := s.store.AddDeviceMiss(ctx, k.key, now, deviceMissWindow); err != nil {
				return store.DeviceGrant{}, fmt.Errorf("add device miss: %w", err)
			}
		}
		s.log.Warn("device login: wrong user code", "token", principalFrom(ctx).tokenID, "key", keys[0].key)
		return store.DeviceGrant{}, errNotFound("No device login is waiting with user code %q: check the code, or start again if it expired.", typed)
	}
	if err != nil {
		return store.DeviceGrant{}, fmt.Errorf("device grant by user code: %w", err)
	}
	return g, nil
}

func toAPIDeviceGrant(g store.DeviceGrant) api.DeviceGrant {
	return api.DeviceGrant{UserCode: g.UserCode, ClientID: g.ClientID, ClientName: g.ClientName, Scopes: g.Scopes,
		Outpost: g.Outpost, SourceIP: g.SourceIP, State: g.State, CreatedAt: g.CreatedAt.Unix(), ExpiresAt: g.ExpiresAt.Unix(),
		ApprovedBy: g.ApprovedBy}
}

// deviceGrant shows a grant to its would-be approver: GET
// /v1/auth/device?user_code=.
func (s *Server) deviceGrant(w http.ResponseWriter, r *http.Request) error {
	g, err := s.pendingGrant(r.Context(), r.URL.Query().Get("user_code"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toAPIDeviceGrant(g))
	return nil
}

// deviceApprove approves a grant: POST /v1/auth/device/approve. The token
// the client will receive is decided here, from what it asked and what the
// approver holds: never more scopes than the approver's, limited to the
// approver's outpost when the approver is, expiring no later than the
// approver.
func (s *Server) deviceApprove(w http.ResponseWriter, r *http.Request) error {
	return s.deviceDecide(w, r, true)
}

// deviceDeny denies a grant: POST /v1/auth/device/deny.
func (s *Server) deviceDeny(w http.ResponseWriter, r *http.Request) error {
	return s.deviceDecide(w, r, false)
}

func (s *Server) deviceDecide(w http.ResponseWriter, r *http.Request, approve bool) error {
	ctx := r.Context()
	var req api.DeviceDecisionRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.UserCode == "" {
		return errBadRequest("user_code is required.")
	}
	g, err := s.pendingGrant(ctx, req.UserCode)
	if err != nil {
		return err
	}
	p := principalFrom(ctx)
	var tok store.Token
	if approve {
		if tok, err = s.deviceTokenFor(ctx, p, g); err != nil {
			return err
		}
	}
	now := s.now()
	var out store.DeviceGrant
	action, details := audit.DeviceDeny, map[string]string{"user_code": g.UserCode}
	if approve {
		action, details["outpost_id"], details["scopes"] = audit.DeviceApprove, tok.OutpostID, strings.Join(tok.Scopes, " ")
	}
	actx := s.audited(ctx, action, audit.Object{Kind: audit.ObjectDeviceLogin, ID: g.UserCode}, details, nil)
	err = s.store.UpdateDeviceGrant(actx, g.DeviceHash, func(g store.DeviceGrant) (store.DeviceUpdate, error) {
		if g.State != store.DevicePending {
			return store.DeviceUpdate{}, errConflict("This device login was %s already.", g.State)
		}
		if !now.Before(g.ExpiresAt) {
			return store.DeviceUpdate{}, errHTTPGone("This device login expired; start again.")
		}
		g.ApprovedBy, g.DecidedAt = p.tokenID, &now
		if approve {
			g.State, g.Token = store.DeviceApproved, tok
		} else {
			g.State = store.DeviceDenied
		}
		out = g
		return store.DeviceUpdate{Grant: g}, nil
	})
	if err != nil {
		return fmt.Errorf("decide device grant %s: %w", g.UserCode, err)
	}
	s.log.Info("device login decided", "user_code", g.UserCode, "state", out.State, "by", p.tokenID,
		"client_id", g.ClientID, "client_name", g.ClientName, "source_ip", g.SourceIP)
	writeJSON(w, http.StatusOK, toAPIDeviceGrant(out))
	return nil
}

// deviceTokenFor decides the token an approval by p mints for g, or
// refuses the approval.
func (s *Server) deviceTokenFor(ctx context.Context, p principal, g store.DeviceGrant) (store.Token, error) {
	// Where the token will hold: the grant's outpost, else the approver's
	// one outpost, else everywhere. The approver must hold each scope
	// there: a person whose role is on one outpost only gives tokens for
	// that outpost, never for every outpost.
	target := p.outpostID
	if target == "" && g.Outpost != "" {
		o, err := s.resolveOutpost(ctx, g.Outpost)
		if err != nil {
			return store.Token{}, err
		}
		target = o.ID
	}
	holds := func(sc string) bool {
		if target == "" {
			return api.HasScope(p.scopes, sc)
		}
		return p.hasOn(target, sc)
	}
	scopes := g.Scopes
	if len(scopes) == 0 {
		scopes = slices.Clone(p.scopes)
		if target != "" {
			scopes = append(scopes, p.outposts[target]...)
		}
	}
	if len(scopes) == 0 {
		return store.Token{}, errForbidden("You hold no role on every outpost, so a login you approve would have no scope: ask for one outpost (outpost login --outpost NAME) where you hold a role.")
	}
	for _, sc := range scopes {
		if !holds(sc) {
			where := "on every outpost"
			if target != "" {
				where = "on that outpost"
			}
			return store.Token{}, errForbidden("This token does not hold the %s scope %s, so it cannot approve a token that has it.", sc, where)
		}
	}
	t := store.Token{Scopes: slices.Compact(slices.Sorted(slices.Values(scopes))), ExpiresAt: p.expiresAt}
	if p.User != nil {
		// A person's approval gives a token of that person's: it never
		// does more than the person may do, now or later.
		t.UserID = p.User.ID
	}
	switch {
	case p.outpostID != "":
		// A limited approver gives only its own outpost; any other name
		// is refused alike, whether that outpost exists or not.
		own, err := s.ownOutpostName(ctx, p)
		if err != nil {
			return store.Token{}, err
		}
		if g.Outpost != "" && g.Outpost != own && g.Outpost != p.outpostID {
			return store.Token{}, errForbidden("This token is limited to outpost %s, so it cannot approve a token for outpost %q.", own, g.Outpost)
		}
		t.OutpostID = p.outpostID
	case g.Outpost != "":
		o, err := s.resolveOutpost(ctx, g.Outpost)
		if err != nil {
			return store.Token{}, err
		}
		t.OutpostID = o.ID
	}
	name := g.ClientID
	if g.ClientName != "" {
		name += " on " + g.ClientName
	}
	t.Name = errorText("%s", fmt.Sprintf("%s (device login approved by %s)", name, p.tokenID))
	return t, nil
}
