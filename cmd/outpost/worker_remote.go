package main

import "net/url"

// checkStaticBaseURL refuses a --static-base-url (of worker start or
// orchestrate) that is not an absolute http or https URL; "" is the
// default.
func checkStaticBaseURL(base string) error {
	if base == "" {
		return nil
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErrorf("--static-base-url %q must be an absolute http:// or https:// URL, such as https://outpost.example.com/dist/", base)
	}
	return nil
}
