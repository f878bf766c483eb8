{{/*
The chart's names and labels, and the checks a render fails on.
*/}}

{{/* outpost-server.name: the chart's name, or nameOverride. */}}
{{- define "outpost-server.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
outpost-server.fullname: fullnameOverride, else the release name when it
already holds the chart's name, else <release>-<chart>; 63 characters at most.
*/}}
{{- define "outpost-server.fullname" -}}
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

{{/* outpost-server.chart: chart name and version, for the helm.sh/chart label. */}}
{{- define "outpost-server.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* outpost-server.selectorLabels: the labels the workload selects its pod by (immutable). */}}
{{- define "outpost-server.selectorLabels" -}}
app.kubernetes.io/name: {{ include "outpost-server.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* outpost-server.labels: the labels of every object of the release. */}}
{{- define "outpost-server.labels" -}}
helm.sh/chart: {{ include "outpost-server.chart" . }}
{{ include "outpost-server.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: server
app.kubernetes.io/part-of: outpost
{{- end }}

{{/* outpost-server.image: repository:tag (tag defaulting to appVersion) or repository@digest. */}}
{{- define "outpost-server.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
outpost-server.publicUrl: server.publicUrl, else https://<first ingress host>
(http:// when no ingress TLS entry names that host), else the in-cluster
Service's URL.
*/}}
{{- define "outpost-server.publicUrl" -}}
{{- if .Values.server.publicUrl }}
{{- .Values.server.publicUrl }}
{{- else if and .Values.ingress.enabled .Values.ingress.hosts }}
{{- $host := (index .Values.ingress.hosts 0).host }}
{{- $tls := false }}
{{- range .Values.ingress.tls }}
{{- if has $host .hosts }}
{{- $tls = true }}
{{- end }}
{{- end }}
{{- printf "%s://%s" (ternary "https" "http" $tls) $host }}
{{- else }}
{{- printf "%s://%s.%s.svc:%v" (ternary "https" "http" (not (empty .Values.server.tls.secretName))) (include "outpost-server.fullname" .) .Release.Namespace .Values.service.port }}
{{- end }}
{{- end }}

{{/* outpost-server.databaseSecret: the Secret holding the PostgreSQL URL, or "" for SQLite. */}}
{{- define "outpost-server.databaseSecret" -}}
{{- if .Values.database.existingSecret }}
{{- .Values.database.existingSecret }}
{{- else if .Values.database.url }}
{{- printf "%s-database" (include "outpost-server.fullname" .) }}
{{- end }}
{{- end }}

{{/* outpost-server.checks: fails the render on values that cannot work. */}}
{{- define "outpost-server.checks" -}}
{{- if and .Values.database.url .Values.database.existingSecret }}
{{- fail "database.url and database.existingSecret are exclusive: give one" }}
{{- end }}
{{- if and .Values.database.url (not (regexMatch "^postgres(ql)?://" .Values.database.url)) }}
{{- fail "database.url must be a PostgreSQL URL starting with postgres:// or postgresql://" }}
{{- end }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- if not (include "outpost-server.databaseSecret" .) }}
{{- fail "replicaCount must be 1 with the embedded SQLite database: it is one process's. Several replicas need an external PostgreSQL database (database.url or database.existingSecret)" }}
{{- end }}
{{- if not .Values.server.secretKey.existingSecret }}
{{- fail "replicaCount above 1 needs server.secretKey.existingSecret: every replica must seal and open session secrets with the same key, and a key file made on first start is one pod's" }}
{{- end }}
{{- if and (eq .Values.kind "Deployment") .Values.persistence.enabled (not (has "ReadWriteMany" .Values.persistence.accessModes)) }}
{{- fail "replicaCount above 1 with kind Deployment cannot share one ReadWriteOnce claim: use kind StatefulSet (a claim per pod), persistence.enabled false (nothing the replicas share is on disk with PostgreSQL), or ReadWriteMany in persistence.accessModes" }}
{{- end }}
{{- end }}
{{- if and .Values.persistence.existingClaim (eq .Values.kind "StatefulSet") }}
{{- fail "persistence.existingClaim is for kind Deployment: a StatefulSet makes its claim from a template" }}
{{- end }}
{{- if and .Values.ingress.enabled (not .Values.ingress.hosts) }}
{{- fail "ingress.enabled needs ingress.hosts: [{host: outpost.example.com, paths: [{path: /, pathType: Prefix}]}]" }}
{{- end }}
{{- end }}

{{/* outpost-server.podTemplate: the server's pod, shared by the Deployment and the StatefulSet. */}}
{{- define "outpost-server.podTemplate" -}}
{{- $scheme := ternary "HTTPS" "HTTP" (not (empty .Values.server.tls.secretName)) -}}
metadata:
  labels:
    {{- include "outpost-server.labels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  # The server talks to no Kubernetes API.
  automountServiceAccountToken: false
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with .Values.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  containers:
    - name: server
      image: {{ include "outpost-server.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command: ["outpost"]
      args:
        - server
        - --listen=0.0.0.0:7420
        - --data-dir=/var/lib/outpost
        - --public-url={{ include "outpost-server.publicUrl" . }}
        - --log-level={{ .Values.server.logLevel }}
        - --log-format={{ .Values.server.logFormat }}
        {{- if .Values.server.tls.secretName }}
        - --tls-cert=/etc/outpost/tls/tls.crt
        - --tls-key=/etc/outpost/tls/tls.key
        {{- end }}
        {{- if gt (int .Values.replicaCount) 1 }}
        # Each replica's own address, where the others forward a request
        # that needs the replica holding a session's connection, and its id.
        - --replica-url={{ lower $scheme }}://$(POD_IP):7420
        - --replica-id=$(POD_NAME)
        {{- end }}
        {{- range .Values.server.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      {{- $db := include "outpost-server.databaseSecret" . }}
      {{- $replicas := gt (int .Values.replicaCount) 1 }}
      {{- if or $db .Values.server.adminToken.existingSecret .Values.server.secretKey.existingSecret .Values.server.extraEnv $replicas }}
      env:
        {{- if $replicas }}
        # First: the arguments' $(POD_IP) and $(POD_NAME) expand from them.
        - name: POD_IP
          valueFrom:
            fieldRef:
              fieldPath: status.podIP
        - name: POD_NAME
          valueFrom:
            fieldRef:
              fieldPath: metadata.name
        {{- end }}
        {{- if $db }}
        - name: OUTPOST_DATABASE_URL
          valueFrom:
            secretKeyRef:
              name: {{ $db }}
              key: {{ .Values.database.key }}
        {{- end }}
        {{- with .Values.server.adminToken.existingSecret }}
        - name: OUTPOST_ADMIN_TOKEN
          valueFrom:
            secretKeyRef:
              name: {{ . }}
              key: {{ $.Values.server.adminToken.key }}
        {{- end }}
        {{- with .Values.server.secretKey.existingSecret }}
        - name: OUTPOST_SECRET_KEY
          valueFrom:
            secretKeyRef:
              name: {{ . }}
              key: {{ $.Values.server.secretKey.key }}
        {{- end }}
        {{- with .Values.server.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- end }}
      ports:
        - name: http
          containerPort: 7420
          protocol: TCP
      # /healthz answers while the process serves; /readyz when the database
      # answers too. Migrations run before the server listens: the startup
      # probe gives them a few minutes.
      startupProbe:
        httpGet:
          path: /healthz
          port: http
          scheme: {{ $scheme }}
        periodSeconds: 2
        failureThreshold: 150
      livenessProbe:
        httpGet:
          path: /healthz
          port: http
          scheme: {{ $scheme }}
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 3
      readinessProbe:
        httpGet:
          path: /readyz
          port: http
          scheme: {{ $scheme }}
        periodSeconds: 5
        timeoutSeconds: 5
        failureThreshold: 3
      {{- with .Values.securityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - name: data
          mountPath: /var/lib/outpost
        - name: tmp
          mountPath: /tmp
        {{- if .Values.server.tls.secretName }}
        - name: tls
          mountPath: /etc/outpost/tls
          readOnly: true
        {{- end }}
  volumes:
    {{- if not .Values.persistence.enabled }}
    - name: data
      emptyDir: {}
    {{- else if ne .Values.kind "StatefulSet" }}
    - name: data
      persistentVolumeClaim:
        claimName: {{ .Values.persistence.existingClaim | default (printf "%s-data" (include "outpost-server.fullname" .)) }}
    {{- end }}
    # The root file system is read-only; /tmp is the one place to write
    # outside the data dir.
    - name: tmp
      emptyDir: {}
    {{- with .Values.server.tls.secretName }}
    - name: tls
      secret:
        secretName: {{ . }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
