package web

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// secretsSection is the outpost page's section of stored secrets: names
// and times only, since the API never returns a value.
type secretsSection struct {
	// Shown is false for a viewer whose token may not manage the
	// outpost's secrets (orchestrator scope); the page then leaves the
	// section out.
	Shown bool
	Items []api.OutpostSecret
	// Name is the name the form is filled with again after a refusal; the
	// value never is.
	Name string
}

// outpostSecrets reads the outpost's stored secrets for its page.
func (h *Handler) outpostSecrets(r *http.Request, o api.Outpost, me api.WhoAmI) secretsSection {
	if !api.HasScope(me.Scopes, api.ScopeOrchestrator) {
		return secretsSection{}
	}
	var l api.OutpostSecretList
	if err := h.call(r, "GET", "/v1/outposts/"+url.PathEscape(o.Spec.Name)+"/secrets", nil, &l); err != nil {
		return secretsSection{}
	}
	return secretsSection{Shown: true, Items: l.Items, Name: strings.TrimSpace(r.PostFormValue("name"))}
}

// setOutpostSecret saves the outpost page's secret form.
func (h *Handler) setOutpostSecret(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSpace(r.PostFormValue("name"))
	path := "/v1/outposts/" + url.PathEscape(r.PathValue("outpost")) + "/secrets/" + url.PathEscape(name)
	if name == "" {
		h.renderOutpost(w, r, http.StatusBadRequest, "Give the secret a name: the environment variable sessions get it as.", "", nil)
		return
	}
	if err := h.call(r, "PUT", path, api.PutOutpostSecretRequest{Value: r.PostFormValue("value")}, nil); err != nil {
		if ae, ok := err.(*apiError); ok && ae.Status == http.StatusUnauthorized {
			h.failAPI(w, r, err)
			return
		}
		h.renderOutpost(w, r, statusOf(err), errText(err), "", nil)
		return
	}
	http.Redirect(w, r, "/ui/outposts/"+url.PathEscape(r.PathValue("outpost"))+"?secret=saved#secrets-h", http.StatusSeeOther)
}

// deleteOutpostSecret serves a secret's delete button.
func (h *Handler) deleteOutpostSecret(w http.ResponseWriter, r *http.Request) {
	path := "/v1/outposts/" + url.PathEscape(r.PathValue("outpost")) + "/secrets/" + url.PathEscape(r.PathValue("name"))
	if err := h.call(r, "DELETE", path, nil, nil); err != nil {
		h.renderOutpost(w, r, statusOf(err), errText(err), "", nil)
		return
	}
	http.Redirect(w, r, "/ui/outposts/"+url.PathEscape(r.PathValue("outpost"))+"?secret=deleted#secrets-h", http.StatusSeeOther)
}
