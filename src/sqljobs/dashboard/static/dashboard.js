// sqljobs dashboard: a little plain script, no library. Served as a file, so the
// Content-Security-Policy allows no inline script. Without it every page still works:
// times stay in the server's zone, nothing refreshes, and forms post unconfirmed.
"use strict";

// Times as the server wrote them ("2026-12-03 09:14:05 CET"), in the reader's zone.
const pad = (n) => String(n).padStart(2, "0");
function localTimes(root) {
  for (const t of root.querySelectorAll("time[datetime]")) {
    const d = new Date(t.dateTime);
    if (Number.isNaN(d.getTime())) continue;
    const zone = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" })
      .formatToParts(d).find((p) => p.type === "timeZoneName").value;
    t.textContent = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} ${zone}`;
  }
}

// Live refresh: fetch this page again and swap its live region, unless the tab is
// hidden, rows are selected, or a form control has the focus (a person is busy there).
function busy(live) {
  if (document.hidden) return true;
  if (live.querySelector("input[type=checkbox]:checked")) return true;
  const focused = document.activeElement;
  return Boolean(focused && focused.closest("form") &&
    focused.matches("input, select, textarea, button"));
}

async function refresh(live) {
  if (busy(live)) return;
  try {
    const answer = await fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } });
    if (!answer.ok || answer.redirected) return;
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    const fresh = page.getElementById("live");
    if (!fresh || busy(live)) return;
    live.replaceChildren(...fresh.childNodes);
    localTimes(live);
  } catch (e) {
    // the server is restarting or the network is down: try again next time
  }
}

// A form with data-confirm asks first (a single job's Delete; bulk actions have a page).
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
});

// "Select every job on this page".
document.addEventListener("change", (event) => {
  const box = event.target;
  if (!(box instanceof HTMLInputElement) || !box.hasAttribute("data-select-all")) return;
  for (const row of box.closest("table").querySelectorAll("input[name=ids]")) row.checked = box.checked;
});

localTimes(document);
const live = document.getElementById("live");
const every = live ? Number(live.dataset.refresh) : 0;
if (live && every > 0) setInterval(() => refresh(live), every);
