# ratekeeper-server, as an image that takes envoyproxy/ratelimit's place
# (Envoy Gateway runs /bin/ratelimit): see docs/service.md.
FROM golang:1.26 AS build
WORKDIR /src
COPY . .
# With go.work, as in the repository: the image holds this tree's root
# module, which server/go.mod requires without a replace.
RUN cd server && CGO_ENABLED=0 go build -trimpath -ldflags=-s -o /out/ratekeeper-server ./cmd/ratekeeper-server

# Static, with CA certificates and a non-root user, and nothing else.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ratekeeper-server /usr/local/bin/ratekeeper-server
COPY --from=build /out/ratekeeper-server /bin/ratelimit
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/ratekeeper-server"]
