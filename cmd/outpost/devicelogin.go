package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/outpost-sh/outpost/api"
)

// deviceAsk is what a device login asks the server for.
type deviceAsk struct {
	// ClientID is api.DeviceClientCLI or api.DeviceClientWorker.
	ClientID string
	// Scopes are the scopes asked; none asks for the approver's own.
	Scopes []string
	// Outpost limits the token to an outpost; "" for none.
	Outpost string
	// NoBrowser leaves the browser closed even where there is a display.
	NoBrowser bool
}

// deviceGrant is a token a device login received.
type deviceGrant struct {
	Token   string
	TokenID string
}

// deviceLogin gets a token by the OAuth 2.0 device authorization grant
// (RFC 8628): it asks server for a code, shows the verification URL and
// the user code (and opens the URL in a browser where there is a display),
// and polls until a person approves or denies, or the code expires: then
// it fails with exit code 1. hc is the HTTP client to use (nil: the
// default).
func deviceLogin(ctx context.Context, f *Factory, server string, hc *http.Client, ask deviceAsk) (deviceGrant, error) {
	base := strings.TrimRight(server, "/")
	cfg := &oauth2.Config{
		ClientID: ask.ClientID,
		Scopes:   ask.Scopes,
		Endpoint: oauth2.Endpoint{
			DeviceAuthURL: base + api.DeviceCodePath,
			TokenURL:      base + api.DeviceTokenPath,
			// The client id goes in the form: the default would try a
			// Basic header first and poll twice each time.
			AuthStyle: oauth2.AuthStyleInParams,
		},
	}
	if hc != nil {
		ctx = context.WithValue(ctx, oauth2.HTTPClient, hc)
	}
	opts := []oauth2.AuthCodeOption{oauth2.SetAuthURLParam("client_name", hostname())}
	if ask.Outpost != "" {
		opts = append(opts, oauth2.SetAuthURLParam("outpost", ask.Outpost))
	}
	da, err := cfg.DeviceAuth(ctx, opts...)
	if err != nil {
		return deviceGrant{}, fmt.Errorf("start the device login at %s: %w", server, oauthErr(err))
	}
	url := da.VerificationURIComplete
	if url == "" {
		url = da.VerificationURI
	}
	fmt.Fprintf(f.IO.ErrOut, "To approve this login, open %s\nsigned in as someone who may approve it, and check that it shows this code:\ncode: %s\n", url, da.UserCode)
	if !ask.NoBrowser {
		openBrowser(ctx, f, url)
	}
	fmt.Fprintf(f.IO.ErrOut, "Waiting for approval (the code expires at %s)...\n", da.Expiry.Local().Format(time.Kitchen))
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		var re *oauth2.RetrieveError
		switch {
		case errors.As(err, &re) && re.ErrorCode == api.OAuthAccessDenied:
			return deviceGrant{}, codeError{code: exitFailed, error: errors.New("the request was denied; nothing was saved")}
		case errors.As(err, &re) && re.ErrorCode == api.OAuthExpiredToken,
			errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			return deviceGrant{}, codeError{code: exitFailed, error: fmt.Errorf("the code %s expired before anyone approved it; nothing was saved: run the command again", da.UserCode)}
		}
		return deviceGrant{}, fmt.Errorf("wait for the device login's approval: %w", oauthErr(err))
	}
	id, _ := tok.Extra("token_id").(string)
	return deviceGrant{Token: tok.AccessToken, TokenID: id}, nil
}

// oauthErr is err with the server's sentence when it answered one.
func oauthErr(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.ErrorDescription != "" {
		return fmt.Errorf("%s: %s", re.ErrorCode, re.ErrorDescription)
	}
	return err
}

// hostname names this machine to the approver.
func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}

// openBrowser opens url in the desktop's browser, best effort: on Linux
// and the BSDs only when there is a display. It waits a few seconds at
// most for the opener, which hands the URL to the browser and exits.
func openBrowser(ctx context.Context, f *Factory, url string) {
	var name string
	var args []string
	switch runtime.GOOS {
	case "darwin":
		name = "open"
	case "windows":
		name, args = "rundll32", []string{"url.dll,FileProtocolHandler"}
	default:
		if f.Getenv("DISPLAY") == "" && f.Getenv("WAYLAND_DISPLAY") == "" {
			return
		}
		name = "xdg-open"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(args, url)...)
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(f.IO.ErrOut, "(could not open a browser: %v; open the URL yourself)\n", err)
	}
}
