# docker/postgres.Dockerfile — PostgreSQL 15 from Debian's package, for the
# compose file's `cluster` profile (several Tessel nodes on one store). Made
# from the same local base image as Tessel's CPU image, so that it builds
# without a registry:
#   docker build -f docker/postgres.Dockerfile -t tessel-postgres docker/
# The first start makes the cluster in /var/lib/postgresql/data (a volume)
# with a database "tessel" owned by role "tessel", whose password is read
# from the file $POSTGRES_PASSWORD_FILE (a compose secret, read as root so
# that it may stay mode 600); the server itself runs as user postgres;
# connections from the compose network use scram-sha-256.
ARG BASE_IMAGE=debian:bookworm
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/postgresql/data /run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENV PGDATA=/var/lib/postgresql/data
VOLUME ["/var/lib/postgresql/data"]
EXPOSE 5432
HEALTHCHECK --interval=5s --timeout=3s --start-period=20s --retries=5 \
  CMD runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_isready -h /run/postgresql -d tessel || exit 1
STOPSIGNAL SIGINT
ENTRYPOINT ["sh", "/usr/local/bin/postgres-entrypoint.sh"]
