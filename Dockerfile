# The AGP service image: the same pinned set as scripts/serve, run by an unprivileged user.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=agp_project.settings.production \
    AGP_VAR_DIR=/app/var

WORKDIR /app
COPY requirements.lock ./
RUN pip install -r requirements.lock

COPY . .
RUN useradd --system --uid 10001 --home-dir /app agp \
    && mkdir -p /app/var \
    && chown agp /app/var
USER agp

EXPOSE 8000
CMD ["gunicorn", "agp_project.wsgi:application", "-c", "gunicorn.conf.py", "--bind", "0.0.0.0:8000", \
     "--workers", "2", "--worker-class", "gthread", "--threads", "4", \
     "--timeout", "60", "--graceful-timeout", "30", "--no-control-socket", \
     "--access-logfile", "-", "--error-logfile", "-"]
