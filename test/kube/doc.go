// Package kube holds the Kubernetes end-to-end tests (envtest). They are not
// built for Windows, where controller-runtime's envtest does not compile.
package kube
