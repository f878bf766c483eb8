// Package v1alpha1 is the outpost.dev/v1alpha1 API group of `outpost
// operator`: the OutpostPool resource, a pool of pods that serve one
// outpost's queue, one pod per claimed session.
//
// The CustomResourceDefinition in deploy/crds is generated from these types
// by controller-gen (go generate ./operator/...); a test keeps the two in
// step.
//
// +kubebuilder:object:generate=true
// +groupName=outpost.dev
package v1alpha1

//go:generate go tool controller-gen object paths=.
//go:generate go tool controller-gen crd:maxDescLen=400 paths=. output:crd:artifacts:config=../../deploy/crds

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of the resources here.
var GroupVersion = schema.GroupVersion{Group: "outpost.dev", Version: "v1alpha1"}

// AddToScheme registers the resources here with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &OutpostPool{}, &OutpostPoolList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// ResumePolicy says what a session's next pod starts from after the session
// was suspended or its pod was lost.
// +kubebuilder:validation:Enum=StartFresh;FilesystemSnapshot
type ResumePolicy string

const (
	// ResumeStartFresh gives every pod an empty workspace (an emptyDir);
	// a resumed session's workspace comes back from the server's snapshot.
	ResumeStartFresh ResumePolicy = "StartFresh"
	// ResumeFilesystemSnapshot gives each session a PersistentVolumeClaim
	// mounted as its workspace, kept while the session is suspended and
	// mounted again by the pod that resumes it.
	ResumeFilesystemSnapshot ResumePolicy = "FilesystemSnapshot"
)

// PoolPhase sums a pool's state up.
type PoolPhase string

const (
	// PoolReady: the pool's queue is watched and its sessions served.
	PoolReady PoolPhase = "Ready"
	// PoolDegraded: the pool cannot serve (a spec the operator refuses, a
	// server it cannot reach); the Ready condition says why.
	PoolDegraded PoolPhase = "Degraded"
	// PoolUnauthorized: the server refused the pool's token.
	PoolUnauthorized PoolPhase = "Unauthorized"
)

// OutpostPool serves one outpost's queue with pods: the operator claims up
// to maxConcurrentSessions of its pending sessions and gives each a pod of
// its own, which runs the session's tool calls and is deleted when the
// session ends.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=opool,categories=outpost
// +kubebuilder:printcolumn:name="Outpost",type=string,JSONPath=`.spec.outpost`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Claimed",type=integer,JSONPath=`.status.claimedSessions`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.maxConcurrentSessions`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type OutpostPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   OutpostPoolSpec   `json:"spec"`
	Status OutpostPoolStatus `json:"status,omitempty"`
}

// OutpostPoolList is a list of OutpostPools.
//
// +kubebuilder:object:root=true
type OutpostPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OutpostPool `json:"items"`
}

// OutpostPoolSpec is what a pool serves and how its pods look.
type OutpostPoolSpec struct {
	// Outpost is the name (or id) of the outpost whose queue the pool
	// serves.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=200
	Outpost string `json:"outpost"`

	// APIURL is the Outpost server's URL (the origin, e.g.
	// https://outpost.example.com). It must be allowed by the operator's
	// --allowed-api-url list; empty means the operator's --default-api-url.
	// +optional
	APIURL string `json:"apiUrl,omitempty"`

	// TokenSecretRef names the Secret, in the pool's namespace, holding an
	// API token of the outposts.machine scope. The token stays with the
	// operator: it never enters a pod or a per-session Secret.
	TokenSecretRef SecretKeyRef `json:"tokenSecretRef"`

	// MaxConcurrentSessions is how many sessions (pods) the pool runs at
	// once; 0 claims nothing new.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MaxConcurrentSessions *int32 `json:"maxConcurrentSessions,omitempty"`

	// Worker is the pod each session gets.
	// +optional
	Worker WorkerSpec `json:"worker,omitempty"`

	// Resume says what a resumed session's pod starts from.
	// +optional
	Resume ResumeSpec `json:"resume,omitempty"`

	// RestartLimit is how many times a session's failed pod is replaced (or
	// its container restarted) before the operator gives the session back
	// to the queue with the reason on its transcript.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	RestartLimit *int32 `json:"restartLimit,omitempty"`

	// Network says whether and how the pool enforces its sessions' network
	// policies (a queue entry's spec.network_policy). Unset, the pool
	// claims no session whose policy is enabled.
	// +optional
	Network NetworkSpec `json:"network,omitempty"`
}

// NetworkEnforcement is how a pool enforces its sessions' network policies.
// +kubebuilder:validation:Enum=None;NetworkPolicy
type NetworkEnforcement string

const (
	// NetworkEnforcementNone: the pool enforces nothing and claims no
	// restricted session (the default).
	NetworkEnforcementNone NetworkEnforcement = "None"
	// NetworkEnforcementNetworkPolicy: each restricted session's pod gets a
	// NetworkPolicy allowing egress only to DNS, the control plane and the
	// policy's ipv4/ipv6 rules, and to the operator's egress proxy when
	// the pool names one (spec.network.egressProxy), which enforces the
	// hostname rules; without one a session whose policy has hostname
	// rules is not claimed. The cluster's network plugin must enforce
	// NetworkPolicy.
	NetworkEnforcementNetworkPolicy NetworkEnforcement = "NetworkPolicy"
)

// NetworkSpec is how a pool enforces its sessions' network policies.
type NetworkSpec struct {
	// Enforcement is None (claim no restricted session; the default) or
	// NetworkPolicy (address rules enforced by a NetworkPolicy per pod;
	// hostname rules by the operator's egress proxy when egressProxy is
	// set, else sessions with hostname rules are not claimed).
	// +optional
	Enforcement NetworkEnforcement `json:"enforcement,omitempty"`

	// ControlPlane is where the session pods reach the Outpost server (its
	// API, gateway and remote builds): NetworkPolicy peers (ipBlock CIDRs
	// of the server's pod or load balancer addresses, or pod and namespace
	// selectors) and the ports, since a NetworkPolicy cannot match a name.
	// Required with NetworkPolicy enforcement.
	// +optional
	ControlPlane *NetworkDestination `json:"controlPlane,omitempty"`

	// DNS is the cluster's DNS servers, reached on port 53 over UDP and
	// TCP. Empty means kube-dns: pods labelled k8s-app=kube-dns in the
	// namespace kube-system.
	// +optional
	DNS []networkingv1.NetworkPolicyPeer `json:"dns,omitempty"`

	// EgressProxy is where session pods reach the operator's egress proxy
	// (the operator runs with --egress-proxy-listen), which enforces
	// hostname rules. Unset, sessions with hostname rules are not claimed.
	// +optional
	EgressProxy *EgressProxy `json:"egressProxy,omitempty"`
}

// EgressProxy is how session pods reach the operator's egress proxy.
type EgressProxy struct {
	// URL is the proxy as pods dial it, http://host:port: usually the
	// operator's Service (http://outpost-operator.outpost-system.svc:3128).
	// No credentials, path or query: each session gets its own credential.
	// +kubebuilder:validation:MinLength=1
	URL string `json:"url"`
	// To are the NetworkPolicy peers the proxy is reached at: the
	// operator's pods (pod and namespace selectors); at least one.
	To []networkingv1.NetworkPolicyPeer `json:"to"`
	// Ports are the ports allowed to them; empty means the URL's port over
	// TCP.
	// +optional
	Ports []networkingv1.NetworkPolicyPort `json:"ports,omitempty"`
}

// NetworkDestination is a set of NetworkPolicy peers and ports.
type NetworkDestination struct {
	// To are the peers; at least one.
	To []networkingv1.NetworkPolicyPeer `json:"to"`
	// Ports are the ports allowed to them; empty means every port.
	// +optional
	Ports []networkingv1.NetworkPolicyPort `json:"ports,omitempty"`
}

// SecretKeyRef names a key of a Secret in the pool's namespace.
type SecretKeyRef struct {
	// Name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Key is the key holding the token.
	// +kubebuilder:default=token
	// +optional
	Key string `json:"key,omitempty"`
}

// WorkerSpec is a session's pod in three layers: the template, then what
// the operator sets on the worker container (command, the spawn contract's
// environment, the workspace volume), then the overrides.
type WorkerSpec struct {
	// Template is the pod's template: sidecars, resources, node selection,
	// security context and so on. The container named ContainerName (added
	// when missing) runs the session.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +optional
	Template corev1.PodTemplateSpec `json:"template,omitempty"`

	// ContainerName names the container that runs the session.
	// +kubebuilder:default=outpost-remote
	// +optional
	ContainerName string `json:"containerName,omitempty"`

	// Overrides replace what the operator would set on the worker
	// container.
	// +optional
	Overrides WorkerOverrides `json:"overrides,omitempty"`
}

// WorkerOverrides replace the operator's choices for the worker container.
type WorkerOverrides struct {
	// Image replaces the template's image and the operator's default.
	// +optional
	Image string `json:"image,omitempty"`
	// Command replaces the container's command (the default runs
	// `outpost worker start --session ID` in direct-serve mode).
	// +optional
	Command []string `json:"command,omitempty"`
	// Args replaces the container's arguments.
	// +optional
	Args []string `json:"args,omitempty"`
}

// ResumeSpec is what a resumed session's pod starts from.
type ResumeSpec struct {
	// Policy is StartFresh (an emptyDir workspace; a resumed session's files
	// come back from the server's snapshot) or FilesystemSnapshot (a
	// PersistentVolumeClaim per session, kept while it is suspended).
	// +kubebuilder:default=StartFresh
	// +optional
	Policy ResumePolicy `json:"policy,omitempty"`
	// VolumeSize is the size of each session's volume (FilesystemSnapshot).
	// Default 20Gi.
	// +optional
	VolumeSize *resource.Quantity `json:"volumeSize,omitempty"`
	// StorageClassName is the storage class of each session's volume;
	// empty means the cluster's default.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
	// SnapshotTTLSeconds is how long a suspended session's volume is kept;
	// 0 or unset means until the session ends.
	// +kubebuilder:validation:Minimum=0
	// +optional
	SnapshotTTLSeconds *int64 `json:"snapshotTtlSeconds,omitempty"`
}

// OutpostPoolStatus is what the operator last saw of the pool.
type OutpostPoolStatus struct {
	// Phase is Ready, Degraded or Unauthorized.
	// +optional
	Phase PoolPhase `json:"phase,omitempty"`
	// ClaimedSessions is how many sessions the pool holds claims on.
	// +optional
	ClaimedSessions int32 `json:"claimedSessions,omitempty"`
	// OutpostID is the id of the outpost served.
	// +optional
	OutpostID string `json:"outpostId,omitempty"`
	// AcceptorID is the identity the pool's claims carry.
	// +optional
	AcceptorID string `json:"acceptorId,omitempty"`
	// WatchCursor is the last cursor of the queue's watch.
	// +optional
	WatchCursor string `json:"watchCursor,omitempty"`
	// ObservedGeneration is the generation of the spec this status is
	// about.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, with the reason it is not.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}
