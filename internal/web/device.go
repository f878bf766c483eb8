package web

import (
	"net/http"
	"net/url"

	"github.com/outpost-sh/outpost/api"
)

// devicePage is where a person approves a device login (a CLI or a worker
// asking for a token): GET /ui/device, with the code filled in from the
// link the machine printed (?user_code=) or typed here. It shows what
// asks, from where, for what, and offers approve and deny. A signed-out
// visitor is asked to sign in first, and comes back here after.
func (h *Handler) devicePage(w http.ResponseWriter, r *http.Request) {
	if token(r) == "" {
		h.render(w, r, http.StatusOK, "signin", page{Title: "Sign in",
			Notice: "Sign in to approve a device login; this page opens again once you have.",
			Data:   signinData(signinNext(r.URL.RequestURI()))})
		return
	}
	code := r.URL.Query().Get("user_code")
	if code == "" {
		h.render(w, r, http.StatusOK, "device", page{Title: "Approve a device login", Data: map[string]any{}})
		return
	}
	h.renderDevice(w, r, http.StatusOK, code, "", "")
}

// renderDevice shows the grant of code, with a notice or an error.
func (h *Handler) renderDevice(w http.ResponseWriter, r *http.Request, status int, code, notice, errMsg string) {
	var g api.DeviceGrant
	if err := h.call(r, "GET", api.DeviceGrantPath+"?"+url.Values{"user_code": {code}}.Encode(), nil, &g); err != nil {
		if ae, ok := err.(*apiError); ok && ae.Status != http.StatusUnauthorized {
			h.render(w, r, ae.Status, "device", page{Title: "Approve a device login", Error: errText(err), Data: map[string]any{}})
			return
		}
		h.failAPI(w, r, err)
		return
	}
	var me api.WhoAmI
	_ = h.call(r, "GET", "/v1/whoami", nil, &me)
	h.render(w, r, status, "device", page{Title: "Approve a device login", Notice: notice, Error: errMsg,
		Data: map[string]any{"Grant": g, "Limited": me.OutpostID != ""}})
}

// deviceDecide posts the form's user code to the API path (approve or
// deny) and shows the outcome.
func (h *Handler) deviceDecide(path string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		code := r.PostFormValue("user_code")
		var g api.DeviceGrant
		if err := h.call(r, "POST", path, api.DeviceDecisionRequest{UserCode: code}, &g); err != nil {
			if ae, ok := err.(*apiError); ok && ae.Status != http.StatusUnauthorized {
				h.render(w, r, ae.Status, "device", page{Title: "Approve a device login", Error: errText(err), Data: map[string]any{}})
				return
			}
			h.failAPI(w, r, err)
			return
		}
		notice := "Denied: the machine gets no token."
		if g.State == "approved" {
			notice = "Approved: the machine receives its token within a few seconds."
		}
		h.render(w, r, http.StatusOK, "device", page{Title: "Approve a device login", Notice: notice,
			Data: map[string]any{"Grant": g}})
	}
}
