// Tensorforge console: upload with progress, live fragments, copy buttons. No dependencies.
(function () {
  "use strict";

  function csrfToken() {
    var m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  function humanSize(n) {
    var units = ["B", "KiB", "MiB", "GiB"], i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + units[i];
  }

  // ---- drag-and-drop upload to POST /api/v1/models with a progress bar
  function setupUpload(zone) {
    var input = zone.querySelector("input[type=file]");
    var status = document.getElementById("upload-status");
    var bar = document.getElementById("upload-bar");
    var text = document.getElementById("upload-text");
    var limit = parseInt(zone.dataset.maxBytes || "0", 10);

    zone.addEventListener("click", function (e) { if (e.target !== input) input.click(); });
    zone.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") input.click(); });
    ["dragenter", "dragover"].forEach(function (ev) {
      zone.addEventListener(ev, function (e) { e.preventDefault(); zone.classList.add("over"); });
    });
    ["dragleave", "drop"].forEach(function (ev) {
      zone.addEventListener(ev, function (e) { e.preventDefault(); zone.classList.remove("over"); });
    });
    zone.addEventListener("drop", function (e) {
      if (e.dataTransfer.files.length) send(e.dataTransfer.files[0]);
    });
    input.addEventListener("change", function () { if (input.files.length) send(input.files[0]); });

    function show(msg, state, pct) {
      status.hidden = false;
      bar.parentElement.className = "progress" + (state ? " " + state : "");
      if (pct !== undefined) bar.style.width = pct + "%";
      text.textContent = msg;
    }

    function send(file) {
      if (limit && file.size > limit) {
        show(file.name + " is " + humanSize(file.size) + "; the limit is " + humanSize(limit) + ".", "bad", 100);
        return;
      }
      var form = new FormData();
      form.append("file", file);
      var xhr = new XMLHttpRequest();
      xhr.open("POST", zone.dataset.url);
      xhr.setRequestHeader("X-CSRFToken", csrfToken());
      xhr.upload.onprogress = function (e) {
        if (e.lengthComputable) {
          var pct = Math.round(100 * e.loaded / e.total);
          show("Uploading " + file.name + " — " + pct + "% of " + humanSize(e.total), "", pct);
        }
      };
      xhr.upload.onload = function () { show("Checking " + file.name + " …", "", 100); };
      xhr.onload = function () {
        var body = {};
        try { body = JSON.parse(xhr.responseText); } catch (err) { body = {}; }
        if (xhr.status === 201) {
          show("Uploaded " + file.name + ". Opening the model …", "ok", 100);
          window.location.href = zone.dataset.modelUrl.replace("00000000-0000-0000-0000-000000000000", body.id);
        } else {
          show("Upload failed (" + xhr.status + "): " + (body.error || xhr.statusText), "bad", 100);
        }
      };
      xhr.onerror = function () { show("Upload failed: the server could not be reached.", "bad", 100); };
      show("Uploading " + file.name + " …", "", 0);
      xhr.send(form);
    }
  }

  // ---- live regions: re-fetch a server-rendered fragment while it says it is live;
  // with data-idle-interval keep checking slowly (jobs submitted from CI appear too)
  function setupLive(region) {
    var fast = parseInt(region.dataset.interval || "1500", 10);
    var idle = parseInt(region.dataset.idleInterval || "0", 10);
    function next() {
      if (region.dataset.live === "true") return fast;
      return idle;
    }
    function schedule(delay) { if (delay) setTimeout(tick, delay); }
    function tick() {
      if (document.hidden) { schedule(next() || fast); return; }
      fetch(region.dataset.url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
        .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
        .then(function (html) {
          var tmp = document.createElement("div");
          tmp.innerHTML = html;
          var fresh = tmp.firstElementChild;
          region.innerHTML = fresh.innerHTML;
          region.dataset.live = fresh.dataset.live;
          bindCopy(region);
          schedule(next());
        })
        .catch(function () { schedule(fast * 4); });
    }
    schedule(next());
  }

  function bindCopy(root) {
    root.querySelectorAll("[data-copy]").forEach(function (btn) {
      btn.addEventListener("click", function () {
        var text = btn.dataset.copy;
        var done = function () { var old = btn.textContent; btn.textContent = "Copied"; setTimeout(function () { btn.textContent = old; }, 1200); };
        if (navigator.clipboard) navigator.clipboard.writeText(text).then(done, done); else done();
      });
    });
  }

  // ---- compare: enable the button when two or more jobs are ticked
  function setupCompare(form) {
    var btn = form.querySelector("button[type=submit]");
    function update() { btn.disabled = form.querySelectorAll("input[name=job]:checked").length < 2; }
    form.addEventListener("change", update);
    update();
  }

  // ---- tuning budget: the amount field only when a budget kind is chosen
  function setupTuning(select) {
    var amount = document.getElementById(select.dataset.amount);
    function update() { amount.disabled = select.value === "none"; }
    select.addEventListener("change", update);
    update();
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-upload]").forEach(setupUpload);
    document.querySelectorAll("[data-live]").forEach(setupLive);
    document.querySelectorAll("form[data-compare]").forEach(setupCompare);
    document.querySelectorAll("select[data-amount]").forEach(setupTuning);
    bindCopy(document);
  });
})();
