--
-- PostgreSQL database dump
--

\restrict xxj3CYwYYvKMtIpxmQDOpfjhv6Z8l2285cyF0cbmv26JOk8MUQaJpOyNsWSNucN

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: blob_chunks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.blob_chunks (
    version bigint NOT NULL,
    n integer NOT NULL,
    data bytea NOT NULL
);
ALTER TABLE ONLY public.blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;


--
-- Name: blob_versions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.blob_versions (
    id bigint NOT NULL,
    key text NOT NULL COLLATE pg_catalog."C",
    state text NOT NULL,
    size bigint DEFAULT 0 NOT NULL,
    sha256 text DEFAULT ''::text NOT NULL,
    chunk_size integer NOT NULL,
    created_at bigint NOT NULL,
    changed_at bigint NOT NULL
);


--
-- Name: blob_versions_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.blob_versions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: blob_versions_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.blob_versions_id_seq OWNED BY public.blob_versions.id;


--
-- Name: calls; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.calls (
    session_id text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    tool text NOT NULL,
    args bytea,
    done boolean NOT NULL,
    ok boolean NOT NULL,
    value bytea,
    error text NOT NULL,
    created_at bigint NOT NULL,
    done_at bigint
);


--
-- Name: connect_tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.connect_tokens (
    hash text NOT NULL COLLATE pg_catalog."C",
    session_id text NOT NULL COLLATE pg_catalog."C",
    epoch bigint NOT NULL,
    created_at bigint NOT NULL
);


--
-- Name: counters; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.counters (
    name text NOT NULL,
    value bigint NOT NULL
);


--
-- Name: events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.events (
    session_id text NOT NULL COLLATE pg_catalog."C",
    seq bigint NOT NULL,
    body_json text NOT NULL
);


--
-- Name: outposts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.outposts (
    id text NOT NULL COLLATE pg_catalog."C",
    name text NOT NULL COLLATE pg_catalog."C",
    platform text NOT NULL,
    description text NOT NULL,
    created_at bigint NOT NULL,
    remote_binary_sha text DEFAULT ''::text NOT NULL,
    allowed_org_ids text[],
    max_running integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 0 NOT NULL,
    max_snapshot_bytes bigint DEFAULT 0 NOT NULL
);


--
-- Name: queue; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.queue (
    session_id text NOT NULL COLLATE pg_catalog."C",
    outpost_id text NOT NULL COLLATE pg_catalog."C",
    kind text NOT NULL,
    platform text NOT NULL,
    phase text NOT NULL COLLATE pg_catalog."C",
    acceptor_id text NOT NULL COLLATE pg_catalog."C",
    claim_deadline bigint,
    epoch bigint NOT NULL,
    session_status text NOT NULL,
    rev bigint NOT NULL,
    deleted boolean NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    live_until bigint,
    remote_binary_sha text DEFAULT ''::text NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 0 NOT NULL,
    attempt_reasons_json text,
    owner text DEFAULT ''::text NOT NULL
);


--
-- Name: queue_horizons; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.queue_horizons (
    outpost_id text NOT NULL COLLATE pg_catalog."C",
    rev bigint NOT NULL
);


--
-- Name: replicas; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.replicas (
    id text NOT NULL,
    url text NOT NULL,
    started_at bigint NOT NULL,
    seen_at bigint NOT NULL
);


--
-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at bigint NOT NULL
);


--
-- Name: sessions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.sessions (
    id text NOT NULL COLLATE pg_catalog."C",
    outpost_id text NOT NULL COLLATE pg_catalog."C",
    title_fold text NOT NULL,
    spec_json text NOT NULL,
    secrets_json text NOT NULL,
    status text NOT NULL COLLATE pg_catalog."C",
    status_detail text NOT NULL,
    reason text NOT NULL,
    last_seq bigint NOT NULL,
    capabilities_json text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    started_at bigint,
    ended_at bigint,
    usage_json text,
    artifacts_pruned_at bigint,
    secrets_key text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C"
);


--
-- Name: settings; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.settings (
    name text NOT NULL COLLATE pg_catalog."C",
    value text NOT NULL COLLATE pg_catalog."C"
);


--
-- Name: snapshots; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.snapshots (
    session_id text NOT NULL COLLATE pg_catalog."C",
    blob_key text NOT NULL,
    size bigint NOT NULL,
    sha256 text NOT NULL,
    files bigint DEFAULT 0 NOT NULL,
    bytes bigint DEFAULT 0 NOT NULL,
    epoch bigint DEFAULT 0 NOT NULL,
    created_at bigint NOT NULL
);


--
-- Name: tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tokens (
    id text NOT NULL COLLATE pg_catalog."C",
    name text NOT NULL,
    hash text NOT NULL COLLATE pg_catalog."C",
    scopes_json text NOT NULL,
    outpost_id text NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint,
    revoked_at bigint
);


--
-- Name: workers; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.workers (
    outpost_id text NOT NULL COLLATE pg_catalog."C",
    acceptor_id text NOT NULL COLLATE pg_catalog."C",
    instance text NOT NULL,
    kind text NOT NULL COLLATE pg_catalog."C",
    info_json text NOT NULL,
    connected_at bigint NOT NULL,
    last_seen_at bigint NOT NULL,
    expires_at bigint NOT NULL
);


--
-- Name: blob_versions id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.blob_versions ALTER COLUMN id SET DEFAULT nextval('public.blob_versions_id_seq'::regclass);


--
-- Data for Name: blob_chunks; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: blob_versions; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: calls; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: connect_tokens; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: counters; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.counters VALUES ('rev', 3);


--
-- Data for Name: events; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.events VALUES ('ses_btsgdgv7ssn4sp6q', 1, '{"seq":1,"session_id":"ses_btsgdgv7ssn4sp6q","time_ms":1796183302899,"type":"status","status":"new","reason":"Waiting in the queue of outpost legacy."}');
INSERT INTO public.events VALUES ('ses_wftpi475wwdg7q4n', 1, '{"seq":1,"session_id":"ses_wftpi475wwdg7q4n","time_ms":1796183302922,"type":"status","status":"new","reason":"Waiting in the queue of outpost legacy."}');
INSERT INTO public.events VALUES ('ses_qdd5eekyp23jksyy', 1, '{"seq":1,"session_id":"ses_qdd5eekyp23jksyy","time_ms":1796183302929,"type":"status","status":"new","reason":"Waiting in the queue of outpost legacy."}');


--
-- Data for Name: outposts; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.outposts VALUES ('outpost_72lgnlmmzp46tzjd', 'legacy', 'linux', '', 1796183302841, '', NULL, 0, 0, 0);


--
-- Data for Name: queue; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.queue VALUES ('ses_btsgdgv7ssn4sp6q', 'outpost_72lgnlmmzp46tzjd', 'new', 'linux', 'pending', '', NULL, 0, 'pending', 1, false, 1796183302899, 1796183302899, NULL, '', 0, 0, 3, NULL, '');
INSERT INTO public.queue VALUES ('ses_wftpi475wwdg7q4n', 'outpost_72lgnlmmzp46tzjd', 'new', 'linux', 'pending', '', NULL, 0, 'pending', 2, false, 1796183302922, 1796183302922, NULL, '', 0, 0, 3, NULL, '');
INSERT INTO public.queue VALUES ('ses_qdd5eekyp23jksyy', 'outpost_72lgnlmmzp46tzjd', 'new', 'linux', 'pending', '', NULL, 0, 'pending', 3, false, 1796183302929, 1796183302929, NULL, '', 0, 0, 3, NULL, '');


--
-- Data for Name: queue_horizons; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: replicas; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.schema_migrations VALUES (1, '0001_init', 1796183302277);
INSERT INTO public.schema_migrations VALUES (2, '0002_claim_liveness', 1796183302310);
INSERT INTO public.schema_migrations VALUES (3, '0003_remote_binary_sha', 1796183302325);
INSERT INTO public.schema_migrations VALUES (4, '0004_outpost_allowed_orgs', 1796183302342);
INSERT INTO public.schema_migrations VALUES (5, '0005_sealed_secrets', 1796183302355);
INSERT INTO public.schema_migrations VALUES (6, '0006_fleet_controls', 1796183302377);
INSERT INTO public.schema_migrations VALUES (7, '0007_snapshots', 1796183302425);
INSERT INTO public.schema_migrations VALUES (8, '0008_outpost_snapshot_limit', 1796183302436);
INSERT INTO public.schema_migrations VALUES (9, '0009_presence', 1796183302463);
INSERT INTO public.schema_migrations VALUES (10, '0010_replicas', 1796183302495);
INSERT INTO public.schema_migrations VALUES (11, '0011_blobs', 1796183302547);
INSERT INTO public.schema_migrations VALUES (12, '0012_queue_prune', 1796183302568);
INSERT INTO public.schema_migrations VALUES (14, '0014_history', 1796183302597);
INSERT INTO public.schema_migrations VALUES (15, '0015_settings', 1796183302612);


--
-- Data for Name: sessions; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.sessions VALUES ('ses_btsgdgv7ssn4sp6q', 'outpost_72lgnlmmzp46tzjd', 't', '{"outpost":"legacy","title":"t","prompt":"","repos":null,"agent":{"kind":"script","steps":[{"tool":"exec","args":{"command":"true"}}]},"env":null,"secret_names":null,"limits":{},"remote_binary_sha":null,"priority":0}', 'v1:091d5830:h9q7_brqZZEHIjPSZvSYQmKTIUWGHWx_t8vhA1ShUrA', 'new', '', 'Waiting in the queue of outpost legacy.', 0, NULL, 1796183302899, 1796183302899, NULL, NULL, NULL, NULL, '091d5830');
INSERT INTO public.sessions VALUES ('ses_wftpi475wwdg7q4n', 'outpost_72lgnlmmzp46tzjd', 't', '{"outpost":"legacy","title":"t","prompt":"","repos":null,"agent":{"kind":"script","steps":[{"tool":"exec","args":{"command":"true"}}]},"env":null,"secret_names":null,"limits":{},"remote_binary_sha":null,"priority":0}', 'v1:091d5830:coWxQvqhJMu_8TonTOIYW5s_VGhlkENrWuJnUkkCJ-U', 'new', '', 'Waiting in the queue of outpost legacy.', 0, NULL, 1796183302922, 1796183302922, NULL, NULL, NULL, NULL, '091d5830');
INSERT INTO public.sessions VALUES ('ses_qdd5eekyp23jksyy', 'outpost_72lgnlmmzp46tzjd', 't', '{"outpost":"legacy","title":"t","prompt":"","repos":null,"agent":{"kind":"script","steps":[{"tool":"exec","args":{"command":"true"}}]},"env":null,"secret_names":null,"limits":{},"remote_binary_sha":null,"priority":0}', 'v1:091d5830:DPCmyQzDNPhcBTP5fZdCeXnchxKfro9RgTzQUBG4zNk', 'new', '', 'Waiting in the queue of outpost legacy.', 0, NULL, 1796183302929, 1796183302929, NULL, NULL, NULL, NULL, '091d5830');


--
-- Data for Name: settings; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.settings VALUES ('secret_key_id', '091d5830');


--
-- Data for Name: snapshots; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: tokens; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.tokens VALUES ('tok_viahrz6hrnlwzf63', 'admin', 'f25ca5c0778d26965c1dda29542c46e440c4b14f0be5436f2dd03e3ab60a433d', '["admin"]', '', 1796183302676, NULL, NULL);
INSERT INTO public.tokens VALUES ('tok_gznutma6oxmw3zzj', 't', '46a7d20c92440db9b1ab1cdc87427f1000cac4cd217e986bb181aab874506b86', '["outposts.machine"]', 'outpost_72lgnlmmzp46tzjd', 1796183302980, NULL, NULL);


--
-- Data for Name: workers; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Name: blob_versions_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.blob_versions_id_seq', 1, false);


--
-- Name: blob_chunks blob_chunks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.blob_chunks
    ADD CONSTRAINT blob_chunks_pkey PRIMARY KEY (version, n);


--
-- Name: blob_versions blob_versions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.blob_versions
    ADD CONSTRAINT blob_versions_pkey PRIMARY KEY (id);


--
-- Name: calls calls_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.calls
    ADD CONSTRAINT calls_pkey PRIMARY KEY (session_id, seq);


--
-- Name: connect_tokens connect_tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.connect_tokens
    ADD CONSTRAINT connect_tokens_pkey PRIMARY KEY (hash);


--
-- Name: counters counters_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.counters
    ADD CONSTRAINT counters_pkey PRIMARY KEY (name);


--
-- Name: events events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (session_id, seq);


--
-- Name: outposts outposts_name_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.outposts
    ADD CONSTRAINT outposts_name_key UNIQUE (name);


--
-- Name: outposts outposts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.outposts
    ADD CONSTRAINT outposts_pkey PRIMARY KEY (id);


--
-- Name: queue_horizons queue_horizons_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.queue_horizons
    ADD CONSTRAINT queue_horizons_pkey PRIMARY KEY (outpost_id);


--
-- Name: queue queue_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.queue
    ADD CONSTRAINT queue_pkey PRIMARY KEY (session_id);


--
-- Name: queue queue_rev_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.queue
    ADD CONSTRAINT queue_rev_key UNIQUE (rev);


--
-- Name: replicas replicas_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.replicas
    ADD CONSTRAINT replicas_pkey PRIMARY KEY (id);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: sessions sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (id);


--
-- Name: settings settings_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.settings
    ADD CONSTRAINT settings_pkey PRIMARY KEY (name);


--
-- Name: snapshots snapshots_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.snapshots
    ADD CONSTRAINT snapshots_pkey PRIMARY KEY (session_id);


--
-- Name: tokens tokens_hash_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tokens
    ADD CONSTRAINT tokens_hash_key UNIQUE (hash);


--
-- Name: tokens tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tokens
    ADD CONSTRAINT tokens_pkey PRIMARY KEY (id);


--
-- Name: workers workers_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.workers
    ADD CONSTRAINT workers_pkey PRIMARY KEY (outpost_id, acceptor_id);


--
-- Name: blob_versions_live; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX blob_versions_live ON public.blob_versions USING btree (key) WHERE (state = 'live'::text);


--
-- Name: blob_versions_sweep; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX blob_versions_sweep ON public.blob_versions USING btree (changed_at) WHERE (state <> 'live'::text);


--
-- Name: connect_tokens_session; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX connect_tokens_session ON public.connect_tokens USING btree (session_id);


--
-- Name: queue_live_rev; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX queue_live_rev ON public.queue USING btree (outpost_id, rev) WHERE (NOT deleted);


--
-- Name: queue_outpost_priority; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX queue_outpost_priority ON public.queue USING btree (outpost_id, phase, priority DESC, created_at, session_id) WHERE (NOT deleted);


--
-- Name: queue_outpost_rev; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX queue_outpost_rev ON public.queue USING btree (outpost_id, rev);


--
-- Name: queue_phase_expiry; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX queue_phase_expiry ON public.queue USING btree (phase, GREATEST(claim_deadline, COALESCE(live_until, (0)::bigint)));


--
-- Name: queue_tombstones; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX queue_tombstones ON public.queue USING btree (updated_at) WHERE deleted;


--
-- Name: sessions_active; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX sessions_active ON public.sessions USING btree (created_at, id) WHERE (status <> ALL (ARRAY['exit'::text, 'error'::text]));


--
-- Name: sessions_artifacts_kept; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX sessions_artifacts_kept ON public.sessions USING btree (ended_at, id) WHERE ((artifacts_pruned_at IS NULL) AND (ended_at IS NOT NULL));


--
-- Name: sessions_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX sessions_created ON public.sessions USING btree (created_at DESC, id DESC);


--
-- Name: sessions_outpost_status; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX sessions_outpost_status ON public.sessions USING btree (outpost_id, status);


--
-- Name: sessions_secrets_key; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX sessions_secrets_key ON public.sessions USING btree (secrets_key);


--
-- Name: sessions_status; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX sessions_status ON public.sessions USING btree (status);


--
-- Name: snapshots_created_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX snapshots_created_at ON public.snapshots USING btree (created_at);


--
-- Name: tokens_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX tokens_created ON public.tokens USING btree (created_at DESC, id DESC);


--
-- Name: workers_expires; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX workers_expires ON public.workers USING btree (expires_at);


--
-- Name: blob_chunks blob_chunks_version_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.blob_chunks
    ADD CONSTRAINT blob_chunks_version_fkey FOREIGN KEY (version) REFERENCES public.blob_versions(id) ON DELETE CASCADE;


--
-- Name: calls calls_session_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.calls
    ADD CONSTRAINT calls_session_id_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(id);


--
-- Name: connect_tokens connect_tokens_session_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.connect_tokens
    ADD CONSTRAINT connect_tokens_session_id_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(id);


--
-- Name: events events_session_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_session_id_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(id);


--
-- Name: queue queue_session_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.queue
    ADD CONSTRAINT queue_session_id_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(id);


--
-- Name: snapshots snapshots_session_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.snapshots
    ADD CONSTRAINT snapshots_session_id_fkey FOREIGN KEY (session_id) REFERENCES public.sessions(id) ON DELETE CASCADE;


--
-- Name: workers workers_outpost_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.workers
    ADD CONSTRAINT workers_outpost_id_fkey FOREIGN KEY (outpost_id) REFERENCES public.outposts(id) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--

\unrestrict xxj3CYwYYvKMtIpxmQDOpfjhv6Z8l2285cyF0cbmv26JOk8MUQaJpOyNsWSNucN

