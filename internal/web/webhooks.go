package web

import (
	"net/http"
	"net/url"

	"github.com/outpost-sh/outpost/api"
)

// webhooksPage lists the webhook subscriptions, a disabled one with the
// notice of why. The API decides who may see them (admin); anyone else
// sees its refusal.
func (h *Handler) webhooksPage(w http.ResponseWriter, r *http.Request) {
	var list api.WebhookList
	if err := h.call(r, "GET", "/v1/webhooks", nil, &list); err != nil {
		h.failAPI(w, r, err)
		return
	}
	disabled := 0
	for _, hk := range list.Items {
		if hk.DisabledAt != nil {
			disabled++
		}
	}
	h.render(w, r, http.StatusOK, "webhooks", page{Title: "Webhooks", Nav: "webhooks", Data: map[string]any{
		"Webhooks": list.Items, "Disabled": disabled,
	}})
}

// webhookPage shows one subscription and its delivery log, newest first.
func (h *Handler) webhookPage(w http.ResponseWriter, r *http.Request) {
	h.renderWebhook(w, r, http.StatusOK, "", "")
}

func (h *Handler) renderWebhook(w http.ResponseWriter, r *http.Request, status int, errMsg, notice string) {
	id := r.PathValue("webhook")
	var list api.WebhookList
	if err := h.call(r, "GET", "/v1/webhooks", nil, &list); err != nil {
		h.failAPI(w, r, err)
		return
	}
	var hook *api.Webhook
	for i := range list.Items {
		if list.Items[i].ID == id {
			hook = &list.Items[i]
		}
	}
	if hook == nil {
		h.fail(w, r, http.StatusNotFound, "Webhook "+id+" does not exist.")
		return
	}
	var ds api.WebhookDeliveryList
	if err := h.call(r, "GET", "/v1/webhooks/"+url.PathEscape(id)+"/deliveries", nil, &ds); err != nil {
		h.failAPI(w, r, err)
		return
	}
	h.render(w, r, status, "webhook", page{Title: "Webhook " + id, Nav: "webhooks", Error: errMsg, Notice: notice, Data: map[string]any{
		"Webhook": hook, "Deliveries": ds.Items,
	}})
}

// redeliver queues a delivery again by hand.
func (h *Handler) redeliver(w http.ResponseWriter, r *http.Request) {
	id, d := r.PathValue("webhook"), r.PathValue("delivery")
	if err := h.call(r, "POST", "/v1/webhooks/"+url.PathEscape(id)+"/deliveries/"+url.PathEscape(d)+"/redeliver", nil, nil); err != nil {
		h.renderWebhook(w, r, statusOf(err), errText(err), "")
		return
	}
	h.renderWebhook(w, r, http.StatusAccepted, "", "Delivery "+d+" is queued again.")
}
