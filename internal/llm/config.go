package llm

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// Provider names for [Config.Provider].
const (
	// ProviderOpenAI is any OpenAI-compatible Chat Completions endpoint.
	ProviderOpenAI = "openai"
	// ProviderAnthropic is Anthropic's Messages API.
	ProviderAnthropic = "anthropic"
)

// Defaults for the zero values of [Config].
const (
	DefaultTimeout    = 10 * time.Minute
	DefaultMaxRetries = 3
)

// Config says which provider to call and how.
type Config struct {
	// Provider is ProviderOpenAI or ProviderAnthropic (case-insensitive);
	// anything else, empty included, makes New fail.
	Provider string
	// BaseURL is the endpoint's root; empty means the provider's public API.
	// For OpenAI-compatible servers it includes the version path, e.g.
	// "http://localhost:11434/v1"; for Anthropic it is the host root, e.g.
	// "https://api.anthropic.com".
	BaseURL string
	// APIKey is sent as a bearer token; empty means none is sent (fine for
	// local servers such as Ollama or vLLM).
	APIKey string
	// Model is the model used when a Request names none; empty means every
	// Request must name one.
	Model string
	// Timeout bounds each attempt (one HTTP request and its response); zero
	// means DefaultTimeout, negative means no limit but the context's. A
	// timed-out attempt is not retried.
	Timeout time.Duration
	// MaxRetries is how many times a retryable failure (429, 5xx,
	// connection error) is retried; zero means DefaultMaxRetries, negative
	// means never.
	MaxRetries int
	// HTTPClient sends the requests; nil means a new client with Go's
	// default transport.
	HTTPClient *http.Client
}

// Names of the environment variables ConfigFromEnv reads; the CLI's flag
// help names them through these.
const (
	EnvProvider = "OUTPOST_LLM_PROVIDER"
	EnvBaseURL  = "OUTPOST_LLM_BASE_URL"
	EnvAPIKey   = "OUTPOST_LLM_API_KEY"
	EnvModel    = "OUTPOST_LLM_MODEL"
)

// ConfigFromEnv reads a Config from EnvProvider, EnvBaseURL, EnvAPIKey and
// EnvModel through getenv (nil means os.Getenv). Other fields are left zero.
func ConfigFromEnv(getenv func(string) string) Config {
	if getenv == nil {
		getenv = os.Getenv
	}
	return Config{
		Provider: strings.TrimSpace(getenv(EnvProvider)),
		BaseURL:  strings.TrimSpace(getenv(EnvBaseURL)),
		APIKey:   strings.TrimSpace(getenv(EnvAPIKey)),
		Model:    strings.TrimSpace(getenv(EnvModel)),
	}
}

// New returns the Provider that cfg describes. Neither SDK reads the
// environment (OPENAI_*, ANTHROPIC_*) or profile files here: cfg is all the
// configuration there is.
func New(cfg Config) (Provider, error) {
	name := strings.ToLower(strings.TrimSpace(cfg.Provider))
	c := &client{
		provider: name,
		model:    cfg.Model,
		timeout:  cfg.Timeout,
		retries:  cfg.MaxRetries,
		backoff:  defaultBackoff,
	}
	if c.timeout == 0 {
		c.timeout = DefaultTimeout
	}
	if c.retries == 0 {
		c.retries = DefaultMaxRetries
	}
	if c.retries < 0 {
		c.retries = 0
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	switch name {
	case ProviderOpenAI:
		c.backend = newOpenAI(cfg.BaseURL, cfg.APIKey, hc)
	case ProviderAnthropic:
		c.backend = newAnthropic(cfg.BaseURL, cfg.APIKey, hc, c.timeout)
	case "":
		return nil, fmt.Errorf("llm: no provider configured: set OUTPOST_LLM_PROVIDER to %q or %q", ProviderOpenAI, ProviderAnthropic)
	default:
		return nil, fmt.Errorf("llm: unknown provider %q: want %q or %q", cfg.Provider, ProviderOpenAI, ProviderAnthropic)
	}
	return c, nil
}
