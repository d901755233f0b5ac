# Switchyard image: static binaries on a distroless base, running as the
# unprivileged user 65532 (manifests/base/deployment.yaml expects it).
# /epp is the endpoint picker (the entrypoint); /site-relay, the per-site
# relay of multi-site load signals, runs from the same image with
# `command: ["/site-relay"]` (manifests/overlays/multisite).
#   docker build -t registry.example.com/switchyard:v0.1.0 .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/epp ./cmd/site-relay

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/epp /epp
COPY --from=build /out/site-relay /site-relay
USER 65532:65532
ENTRYPOINT ["/epp"]
