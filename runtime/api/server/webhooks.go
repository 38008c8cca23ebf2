package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/egress"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/webhook"
)

// WebhookConfig is where and how the server posts runs' ends.
type WebhookConfig struct {
	// Allow is where webhooks may go. Empty (the default): nowhere, and a
	// run that names a webhook is refused: a server that posted to any
	// address a caller named would reach, for the caller, whatever the
	// server can reach (its loopback, its network's services, a cloud's
	// metadata address), so the addresses are a list its operator
	// decides.
	Allow *egress.Policy
	// Secret signs the messages (see package webhook); required with
	// Allow. Every server sharing a store must have the same.
	Secret []byte
	// Flows sets the webhook of the runs of a flow (by its name) that
	// name none.
	Flows map[string]string
	// Timeout bounds an attempt, Attempts counts them, Backoff is the
	// wait before the second (doubled each time after): see
	// webhook.Sender for the defaults.
	Timeout  time.Duration
	Attempts int
	Backoff  time.Duration
}

// WebhookSecretEnv names the environment variable holding the secret
// webhooks are signed with (whsec_ and base64).
const WebhookSecretEnv = "TRELLIS_WEBHOOK_SECRET"

// webhooks is the server's side of the webhooks: the store's queue and
// the sender working it (nil sender: this server sends none).
type webhooks struct {
	store  store.Webhooks
	cfg    *WebhookConfig
	sender *webhook.Sender
}

// startWebhooks checks the webhook configuration and starts the sender,
// until ctx ends.
func (s *Server) startWebhooks(ctx context.Context) error {
	s.hooks = &webhooks{}
	s.hooks.store, _ = store.WebhooksOf(s.eng().Store)
	cfg := s.cfg.Webhooks
	if cfg == nil || cfg.Allow.Empty() {
		if cfg != nil && len(cfg.Flows) > 0 {
			return errors.New("webhooks are set for flows, but no address is allowed: set the webhook allow-list")
		}
		return nil
	}
	if s.hooks.store == nil {
		return fmt.Errorf("webhooks: the store %T keeps no webhook deliveries", s.eng().Store)
	}
	if len(cfg.Secret) == 0 {
		return fmt.Errorf("webhooks: no secret to sign them with (set %s to a secret such as %s)", WebhookSecretEnv, webhook.NewSecret())
	}
	for flow, url := range cfg.Flows {
		if err := cfg.Allow.CheckURL(url); err != nil {
			return fmt.Errorf("the webhook of flow %q: %w", flow, err)
		}
	}
	s.hooks.cfg = cfg
	s.hooks.sender = &webhook.Sender{Store: s.hooks.store, Server: s.runs.id, Secret: cfg.Secret, Allow: cfg.Allow, Payload: s.webhookPayload,
		Timeout: cfg.Timeout, Attempts: cfg.Attempts, Backoff: cfg.Backoff, Every: 5 * s.cfg.PollEvery, Log: s.log}
	go s.hooks.sender.Run(ctx)
	return nil
}

// kickWebhooks has the sender look for due deliveries now (a run ended).
func (s *Server) kickWebhooks() {
	if s.hooks != nil && s.hooks.sender != nil {
		s.hooks.sender.Kick()
	}
}

// addDelivery records the webhook delivery of a run about to be queued,
// when it names one (or its flow has one): refused, before anything is
// recorded, when this server sends no webhooks or its allow-list does not
// permit the address.
func (s *Server) addDelivery(ctx context.Context, rec *store.RunRecord, url string) error {
	if url == "" && s.hooks.cfg != nil {
		url = s.hooks.cfg.Flows[rec.Flow]
	}
	if url == "" {
		return nil
	}
	if s.hooks.sender == nil {
		return &api.Error{Code: api.CodeInvalidInput, Message: "this server sends no webhooks (its allow-list is empty): start the run without one",
			Details: map[string]string{"field": "webhook"}}
	}
	if err := s.hooks.cfg.Allow.CheckURL(url); err != nil {
		return &api.Error{Code: api.CodeInvalidInput, Message: "the webhook " + url + ": " + err.Error(), Details: map[string]string{"field": "webhook"}}
	}
	// named after the run: servers starting the same run (a schedule's
	// tick) record one delivery
	err := s.hooks.store.AddDelivery(ctx, &store.Delivery{ID: "msg_" + strings.TrimPrefix(rec.ID, "run_"), Tenant: rec.Tenant, Thread: rec.Thread,
		Run: rec.ID, URL: url, Created: rec.Created})
	if errors.Is(err, store.ErrExists) {
		return nil
	}
	return err
}

// webhookPayload is the body of a delivery: the run's end, as the run's
// route shows the run.
func (s *Server) webhookPayload(ctx context.Context, d *store.Delivery) ([]byte, error) {
	rec, err := s.cat.Run(ctx, d.Tenant, d.Run)
	if err != nil {
		return nil, err
	}
	info := runInfo(*rec, nil)
	info.Output = s.runOutput(ctx, *rec)
	return json.Marshal(api.WebhookEvent{Type: "run." + string(rec.Status), Timestamp: rec.Finished, Data: info})
}

func (s *Server) webhookRoutes() []route {
	return []route{
		{method: "GET", path: "/v1/threads/{id}/runs/{run}/webhooks", access: tenant, handle: s.runWebhooks},
	}
}

func (s *Server) runWebhooks(w http.ResponseWriter, r *http.Request, c *caller) error {
	_, rec, err := s.run(r, c)
	if err != nil {
		return err
	}
	out := api.Deliveries{Deliveries: []api.Delivery{}}
	if s.hooks.store != nil {
		ds, err := s.hooks.store.Deliveries(r.Context(), c.tenant, rec.ID)
		if err != nil {
			return err
		}
		for _, d := range ds {
			out.Deliveries = append(out.Deliveries, deliveryInfo(d))
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func deliveryInfo(d *store.Delivery) api.Delivery {
	out := api.Delivery{ID: d.ID, Run: d.Run, URL: d.URL, Status: string(d.Status), Created: d.Created, Attempts: []api.Attempt{}}
	if d.Status == store.DeliveryPending && !d.Next.IsZero() {
		next := d.Next
		out.Next = &next
	}
	for _, a := range slices.Clone(d.Log) {
		out.Attempts = append(out.Attempts, api.Attempt{N: a.N, At: a.At, Server: a.Server, Status: a.Status, Error: a.Error, TookMS: a.Took.Milliseconds()})
	}
	return out
}
