// The config generator's script: every edit goes to /config/api/edit (one dotted key),
// then /config/api/check runs `rft validate`'s checks and each finding is shown next to
// the field its dotted key names (or the nearest section holding it).
"use strict";
(() => {
  const yamlBox = document.getElementById("yaml");
  const formBody = document.getElementById("form-body");
  const status = document.getElementById("status");
  const mode = document.querySelector(".columns").dataset.mode;
  let queue = Promise.resolve();
  let pending = 0;

  function busy(delta) {
    pending += delta;
    status.dataset.pending = String(pending);
  }

  async function post(path, body) {
    const response = await fetch(path, {
      method: "POST", credentials: "same-origin",
      headers: {"content-type": "application/json"}, body: JSON.stringify(body)});
    return response.json();
  }

  // run `job` after every earlier edit (edits apply in the order they were made)
  function enqueue(job) {
    busy(1);
    queue = queue.then(job).catch((error) => { status.textContent = String(error); })
      .finally(() => busy(-1));
    return queue;
  }

  function parentKey(key) {
    const cut = Math.max(key.lastIndexOf("."), key.lastIndexOf("["));
    return cut > 0 ? key.slice(0, cut) : "";
  }

  function placeFor(key) {
    for (let k = key; ; k = parentKey(k)) {
      const found = document.querySelector(`[data-findings-for="${CSS.escape(k)}"]`);
      if (found || k === "") return found;
    }
  }

  function show(problems, warnings) {
    document.querySelectorAll("[data-findings-for]").forEach((el) => { el.textContent = ""; });
    const all = document.getElementById("all-findings");
    all.textContent = "";
    const add = (line, cls) => {
      const key = line.split(": ", 1)[0];
      const where = placeFor(key);
      const item = document.createElement("div");
      item.className = cls; item.textContent = line; item.dataset.key = key;
      if (where) where.appendChild(item);
      const li = document.createElement("li");
      li.className = cls; li.textContent = line;
      all.appendChild(li);
    };
    problems.forEach((line) => add(line, "problem"));
    warnings.forEach((line) => add(line, "warning"));
    status.className = problems.length ? "invalid" : "valid";
    status.textContent = problems.length
      ? `${problems.length} problem(s), ${warnings.length} warning(s)`
      : `valid (${warnings.length} warning(s))`;
  }

  async function check() {
    const found = await post("/config/api/check", {yaml: yamlBox.value});
    show(found.problems, found.warnings);
  }

  async function rebuild() {
    const built = await post("/config/api/form", {yaml: yamlBox.value, mode});
    if (built.problems && built.problems.length) { show(built.problems, []); return false; }
    // keep what is being typed into a field while the form is rebuilt
    const active = document.activeElement;
    const typing = active && active.dataset && active.dataset.key
      ? {key: active.dataset.key, value: active.value} : null;
    formBody.innerHTML = built.html;
    yamlBox.value = built.yaml;
    if (typing) {
      const again = formBody.querySelector(`[data-key="${CSS.escape(typing.key)}"]`);
      if (again) { again.value = typing.value; again.focus(); }
    }
    return true;
  }

  async function edit(change, restructure) {
    const done = await post("/config/api/edit", {yaml: yamlBox.value, ...change});
    if (done.error) { show([done.error], []); return; }
    yamlBox.value = done.yaml;
    if (restructure) await rebuild();
    if (pending === 1) await check();  // the last queued edit checks for all before it
  }

  formBody.addEventListener("change", (event) => {
    const input = event.target;
    if (!input.dataset || !input.dataset.key) return;
    const value = input.value.trim();
    enqueue(() => edit(value === "" ? {action: "unset", key: input.dataset.key}
                                    : {action: "set", key: input.dataset.key, value},
                       Boolean(input.dataset.restructure)));
  });
  formBody.addEventListener("click", (event) => {
    const button = event.target.closest("button");
    if (!button) return;
    if (button.dataset.add) enqueue(() => edit({action: "add", key: button.dataset.add}, true));
    if (button.dataset.remove) {
      event.preventDefault();
      enqueue(() => edit({action: "remove", key: button.dataset.remove}, true));
    }
  });

  function importText(text) {
    enqueue(async () => {
      yamlBox.value = text;
      if (await rebuild()) await check();
    });
  }
  document.getElementById("import").addEventListener("click", () => importText(yamlBox.value));
  document.getElementById("import-file").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (file) importText(await file.text());
  });

  document.getElementById("export").addEventListener("click", () => enqueue(async () => {
    const found = await post("/config/api/export", {yaml: yamlBox.value});
    show(found.problems, found.warnings);
    const out = document.getElementById("exported");
    if (!found.valid) { out.hidden = true; return; }
    out.textContent = found.yaml; out.hidden = false;
    const link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([found.yaml], {type: "application/yaml"}));
    link.download = "config.yaml";
    link.click();
    status.textContent = "exported: config.yaml (valid)";
  }));
  enqueue(check);  // the empty config's findings (what must be set) from the start
})();
