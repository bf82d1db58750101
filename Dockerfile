# Multi-stage build: scripts/build --release builds the server and the wasm site; a slim
# Debian image runs them. Untested on the development machines (no Docker engine there); see README.
FROM rust:1.95-bookworm AS build
RUN rustup target add wasm32-unknown-unknown \
 && apt-get update && apt-get install -y --no-install-recommends nodejs npm curl && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The same tools as scripts/run (wasm-bindgen-cli pinned to Cargo.lock, wasm-opt from npm),
# then the optimised build (release server, wasm at opt-level z with LTO, wasm-opt).
RUN bash -c 'source scripts/lib.sh && ensure_wasm_opt' && scripts/build --release --site target/site

FROM debian:bookworm-slim AS runtime
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home /app tessera \
 && mkdir -p /app/data && chown tessera:tessera /app/data
WORKDIR /app
COPY --from=build /src/target/release/tessera /usr/local/bin/tessera
COPY --from=build /src/target/site /app/site
COPY tessera.example.toml /app/tessera.toml
ENV TESSERA_SITE_ROOT=/app/site \
    TESSERA_BIND=0.0.0.0:3000 \
    TESSERA_LOG_FORMAT=json \
    TESSERA_QUOTA_JOURNAL=/app/data/quota-journal.log
# The quota journal (admissions while Redis is away) must outlive the container.
VOLUME /app/data
USER tessera
EXPOSE 3000
CMD ["tessera", "serve"]
