package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// auditPage shows a page of the audit log with its filters. The API
// decides who may read it (an admin not limited to an outpost); anyone
// else sees its refusal.
func (h *Handler) auditPage(w http.ResponseWriter, r *http.Request) {
	in := r.URL.Query()
	action, actor := strings.TrimSpace(in.Get("action")), strings.TrimSpace(in.Get("actor"))
	sinceH := strings.TrimSpace(in.Get("since_h"))
	q := url.Values{"first": {"100"}}
	if action != "" {
		q.Set("action", action)
	}
	if actor != "" {
		q.Set("actor", actor)
	}
	if sinceH != "" {
		n, err := strconv.Atoi(sinceH)
		if err != nil || n < 1 || n > api.MaxAuditWindowDays*24 {
			h.fail(w, r, http.StatusBadRequest, "Last hours must be a whole number from 1 to 2400 (100 days).")
			return
		}
		q.Set("time_after", strconv.FormatInt(time.Now().Add(-time.Duration(n)*time.Hour).Unix(), 10))
	}
	if after := in.Get("after"); after != "" {
		q.Set("after", after)
	}
	var list api.AuditLogList
	if err := h.call(r, "GET", api.AuditLogsPath+"?"+q.Encode(), nil, &list); err != nil {
		h.failAPI(w, r, err)
		return
	}
	next := ""
	if list.HasNextPage && list.EndCursor != nil {
		nq := url.Values{"after": {*list.EndCursor}, "action": {action}, "actor": {actor}, "since_h": {sinceH}}
		next = "/ui/audit?" + nq.Encode()
	}
	h.render(w, r, http.StatusOK, "audit", page{Title: "Audit log", Nav: "audit", Data: map[string]any{
		"Items": list.Items, "Total": list.Total, "Next": next, "Action": action, "Actor": actor, "SinceH": sinceH,
	}})
}
