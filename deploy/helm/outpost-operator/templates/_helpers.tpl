{{/*
The chart's names and labels, and the checks a render fails on.
*/}}

{{/* outpost-operator.name: the chart's name, or nameOverride. */}}
{{- define "outpost-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
outpost-operator.fullname: the name of the release's objects: fullnameOverride,
else the release name when it already holds the chart's name, else
<release>-<chart>; 63 characters at most (a DNS label).
*/}}
{{- define "outpost-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* outpost-operator.chart: chart name and version, for the helm.sh/chart label. */}}
{{- define "outpost-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* outpost-operator.selectorLabels: the labels the Deployment selects its pods by (never change them: a selector is immutable). */}}
{{- define "outpost-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "outpost-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* outpost-operator.labels: the labels of every object of the release. */}}
{{- define "outpost-operator.labels" -}}
helm.sh/chart: {{ include "outpost-operator.chart" . }}
{{ include "outpost-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: outpost
{{- end }}

{{/* outpost-operator.serviceAccountName: the ServiceAccount the operator runs as. */}}
{{- define "outpost-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "outpost-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false: the ServiceAccount the operator runs as" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* outpost-operator.image: the operator's image, repository:tag or repository@digest; the tag defaults to the chart's appVersion. */}}
{{- define "outpost-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* outpost-operator.workerImage: the image of a session's pod when its pool names none (--worker-image). */}}
{{- define "outpost-operator.workerImage" -}}
{{- $w := .Values.operator.workerImage }}
{{- if $w.digest }}
{{- printf "%s@%s" $w.repository $w.digest }}
{{- else }}
{{- printf "%s:%s" $w.repository (default .Chart.AppVersion $w.tag) }}
{{- end }}
{{- end }}

{{/*
outpost-operator.watchNamespaces: the namespaces the operator watches, one
per line; none means every namespace.
*/}}
{{- define "outpost-operator.watchNamespaces" -}}
{{- range (.Values.operator.watchNamespaces | uniq) }}
{{ . }}
{{- end }}
{{- end }}

{{/*
outpost-operator.origin: a URL's origin as the operator compares it:
scheme://host:port, lower case, the port explicit (the scheme's default when
the URL gives none), the host without a trailing dot. Fails the render on a
URL that is not an http(s) origin. Called with (list "the value's name" URL).
*/}}
{{- define "outpost-operator.origin" -}}
{{- $what := index . 0 }}
{{- $raw := index . 1 }}
{{- $u := urlParse $raw }}
{{- $scheme := lower $u.scheme }}
{{- if not (has $scheme (list "http" "https")) }}
{{- fail (printf "%s %q must be an http:// or https:// URL" $what $raw) }}
{{- end }}
{{- if $u.userinfo }}
{{- fail (printf "%s %q must not hold a user name or password" $what $raw) }}
{{- end }}
{{- if not (has $u.path (list "" "/")) }}
{{- fail (printf "%s %q must be an origin (scheme://host[:port]), without a path" $what $raw) }}
{{- end }}
{{- $hostname := lower $u.hostname | trimSuffix "." }}
{{- if not $hostname }}
{{- fail (printf "%s %q has no host" $what $raw) }}
{{- end }}
{{- $port := regexFind ":[0-9]+$" $u.host | trimPrefix ":" }}
{{- if not $port }}
{{- $port = ternary "443" "80" (eq $scheme "https") }}
{{- end }}
{{- printf "%s://%s:%d" $scheme $hostname (int $port) }}
{{- end }}

{{/*
outpost-operator.apiUrlAllowed: "true" when the origin (list . origin) is
operator.defaultApiUrl's or allowed by operator.allowedApiUrls: an equal
origin, or a wildcard https://*.example.com, which matches one more DNS label
in front (a.example.com, not a.b.example.com nor example.com) with the same
scheme and port: the rule the operator applies (--default-api-url,
--allowed-api-url).
*/}}
{{- define "outpost-operator.apiUrlAllowed" -}}
{{- $ctx := index . 0 }}
{{- $origin := index . 1 }}
{{- $allowed := $ctx.Values.operator.allowedApiUrls | default list }}
{{- with $ctx.Values.operator.defaultApiUrl }}
{{- $allowed = append $allowed . }}
{{- end }}
{{- $ok := false }}
{{- range $allowed }}
{{- $entry := include "outpost-operator.origin" (list "operator.allowedApiUrls entry" .) }}
{{- if eq $entry $origin }}
{{- $ok = true }}
{{- else if contains "://*." $entry }}
{{- $parts := splitn "://*." 2 $entry }}
{{- $prefix := printf "%s://" $parts._0 }}
{{- $suffix := printf ".%s" $parts._1 }}
{{- if and (hasPrefix $prefix $origin) (hasSuffix $suffix $origin) }}
{{- $label := trimSuffix $suffix (trimPrefix $prefix $origin) }}
{{- if and $label (not (contains "." $label)) (not (contains "*" $label)) }}
{{- $ok = true }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $ok }}
{{- end }}

{{/*
outpost-operator.poolRules: what the operator needs where pools live: read
its pools and write their status and finalizer; make, watch and delete the
sessions' Pods and PersistentVolumeClaims; write the per-session Secrets and
read the pools' token Secrets by name — never list or watch Secrets, so the
operator holds no cache of them; write the restricted sessions'
NetworkPolicies (listed to collect those of gone pods, never watched);
record events.
*/}}
{{- define "outpost-operator.poolRules" -}}
- apiGroups: ["outpost.dev"]
  resources: ["outpostpools"]
  verbs: ["get", "list", "watch", "update", "patch"]
- apiGroups: ["outpost.dev"]
  resources: ["outpostpools/status"]
  verbs: ["get", "update", "patch"]
- apiGroups: ["outpost.dev"]
  resources: ["outpostpools/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods", "persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "update", "patch", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "create", "update", "patch", "delete"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch", "update"]
{{- end }}
