#!/usr/bin/env bash
# Debian packages the pipeline needs: a CJK font for the report plots, tesseract + chi_sim for OCR of
# scanned PDFs, chromium for the browser check of the Prefect UI (ops.ui_check), libgomp1 (the OpenMP runtime
# LightGBM's wheel links, for the answer span ranker). Installs only what is missing; skipped (with a note) where apt-get or root is unavailable.
set -euo pipefail
pkgs=(fonts-wqy-zenhei tesseract-ocr tesseract-ocr-chi-sim chromium libgomp1)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
  echo "note: cannot install ${missing[*]} (needs apt-get as root); plots fall back to a latin font, OCR and the UI check are off" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
