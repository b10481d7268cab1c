// Forms generated from JSON schemas: the `schema` of a request (response_format) and the
// `parameters` of a tool. Supported field types: string (with format date/email/uri),
// number, integer, boolean, enum (any type), arrays of strings or enums; anything else is a
// JSON text field. `required` fields get a visible marker and the `required` attribute.
// Labels and descriptions from the schema are agent-supplied text: textContent only.

import { h, uid } from "./dom.js";

/** Unwrap the shapes a schema arrives in: a bare schema, {name, schema, strict} or a response_format. */
export function unwrapSchema(schema) {
  let s = schema;
  for (let i = 0; i < 3 && s && typeof s === "object"; i++) {
    if (s.type === "json_schema" && s.json_schema) s = s.json_schema;
    else if (s.schema && typeof s.schema === "object" && !s.properties) s = s.schema;
    else break;
  }
  return s && typeof s === "object" ? s : {};
}

const ANNOTATIONS = ["title", "description", "default", "format"];

/**
 * Make a property renderable: follow a local `$ref` (`#/$defs/X`, `#/definitions/X`) and
 * unwrap the one-branch shapes pydantic emits (`anyOf: [X, {type: "null"}]` for an optional
 * field, `allOf: [X]`), keeping the outer title, description and default.
 */
export function resolveProp(prop, root, depth = 0) {
  if (!prop || typeof prop !== "object" || depth > 8) return prop || {};
  let inner = null;
  if (typeof prop.$ref === "string") {
    const m = /^#\/(\$defs|definitions)\/(.+)$/.exec(prop.$ref);
    const defs = m && root && typeof root[m[1]] === "object" ? root[m[1]] : null;
    inner = defs && defs[m[2]] && typeof defs[m[2]] === "object" ? defs[m[2]] : null;
  } else {
    const list = Array.isArray(prop.anyOf) ? prop.anyOf : Array.isArray(prop.allOf) ? prop.allOf : null;
    const branches = list ? list.filter((b) => !(b && b.type === "null")) : [];
    if (list && branches.length === 1) inner = branches[0];
  }
  if (!inner) {
    if (prop.items && typeof prop.items === "object") return { ...prop, items: resolveProp(prop.items, root, depth + 1) };
    return prop;
  }
  const out = { ...resolveProp(inner, root, depth + 1) };
  if (typeof prop.$ref === "string") delete out.title; // a definition's title names a class, not this field
  for (const k of ANNOTATIONS) if (prop[k] !== undefined && prop[k] !== null) out[k] = prop[k];
  if (prop.default === null && out.default === undefined) delete out.default;
  return out;
}

function mainType(prop) {
  let t = prop.type;
  if (Array.isArray(t)) t = t.find((x) => x !== "null") || "string";
  return t;
}

function jsonText(v) {
  return typeof v === "string" ? v : JSON.stringify(v);
}

/**
 * Build the fields for an object schema.
 * @returns {{element: HTMLElement, read: () => ({ok: true, value: any} | {ok: false, error: string, field?: HTMLElement}), focus: () => void}}
 */
export function buildSchemaFields(rawSchema) {
  const root = unwrapSchema(rawSchema);
  const schema = resolveProp(root, root);
  const wrap = h("div", { class: "schema-fields" });
  const isObject = mainType(schema) === "object" || (schema.properties && typeof schema.properties === "object");
  if (!isObject) {
    // A non-object schema: one field whose value is sent as is.
    const f = buildField("value", schema, true);
    wrap.append(f.element);
    return { element: wrap, read: () => f.read(), focus: () => f.input.focus() };
  }
  const props = schema.properties && typeof schema.properties === "object" ? schema.properties : {};
  const required = new Set(Array.isArray(schema.required) ? schema.required : []);
  const fields = [];
  for (const [name, prop] of Object.entries(props)) {
    const f = buildField(name, resolveProp(prop && typeof prop === "object" ? prop : {}, root), required.has(name));
    fields.push({ name, ...f });
    wrap.append(f.element);
  }
  if (!fields.length) wrap.append(h("p", { class: "hint-inline", text: "No fields." }));
  return {
    element: wrap,
    focus: () => fields[0] && fields[0].input.focus(),
    read() {
      const value = {};
      for (const f of fields) {
        const r = f.read();
        if (!r.ok) return r;
        if (r.value !== undefined) value[f.name] = r.value;
      }
      return { ok: true, value };
    },
  };
}

function labelFor(name, prop, required, id) {
  const label = h("label", { for: id }, String(prop.title || name));
  if (required) label.append(h("span", { class: "req", "aria-hidden": "true" }, "*"));
  return label;
}

function describe(prop, input, parts) {
  if (typeof prop.description === "string" && prop.description) {
    const did = uid("desc");
    input.setAttribute("aria-describedby", did);
    parts.push(h("span", { class: "desc", id: did }, prop.description));
  }
}

function buildField(name, prop, required) {
  const id = uid("f");
  const type = mainType(prop);
  const fail = (input, error) => ({ ok: false, error: `${prop.title || name}: ${error}`, field: input });

  if (Array.isArray(prop.enum) && prop.enum.length) {
    const select = h("select", { id, name, required });
    select.append(h("option", { value: "" }, required ? "Choose…" : "—"));
    prop.enum.forEach((v, i) => select.append(h("option", { value: String(i) }, jsonText(v))));
    if (prop.default !== undefined) {
      const i = prop.enum.findIndex((v) => JSON.stringify(v) === JSON.stringify(prop.default));
      if (i >= 0) select.value = String(i);
    }
    const parts = [labelFor(name, prop, required, id), select];
    describe(prop, select, parts);
    return {
      input: select,
      element: h("div", { class: "field" }, parts),
      read() {
        if (select.value === "") return required ? fail(select, "choose a value") : { ok: true, value: undefined };
        return { ok: true, value: prop.enum[Number(select.value)] };
      },
    };
  }

  if (type === "boolean") {
    const box = h("input", { id, name, type: "checkbox" });
    box.checked = prop.default === true;
    const parts = [box, labelFor(name, prop, false, id)];
    describe(prop, box, parts);
    return {
      input: box,
      element: h("div", { class: "field checkbox" }, parts),
      read: () => ({ ok: true, value: box.checked }),
    };
  }

  if (type === "number" || type === "integer") {
    const input = h("input", {
      id,
      name,
      type: "number",
      inputmode: type === "integer" ? "numeric" : "decimal",
      step: type === "integer" ? "1" : "any",
      required,
      min: typeof prop.minimum === "number" ? String(prop.minimum) : null,
      max: typeof prop.maximum === "number" ? String(prop.maximum) : null,
    });
    if (typeof prop.default === "number") input.value = String(prop.default);
    const parts = [labelFor(name, prop, required, id), input];
    describe(prop, input, parts);
    return {
      input,
      element: h("div", { class: "field" }, parts),
      read() {
        const raw = input.value.trim();
        if (raw === "") return required ? fail(input, "enter a number") : { ok: true, value: undefined };
        const n = Number(raw);
        if (!Number.isFinite(n)) return fail(input, "not a number");
        if (type === "integer" && !Number.isInteger(n)) return fail(input, "must be a whole number");
        return { ok: true, value: n };
      },
    };
  }

  if (type === "string" || (type === undefined && !prop.properties && !prop.items)) {
    const long = (typeof prop.maxLength === "number" && prop.maxLength > 200) || prop.format === "textarea";
    const inputType = { date: "date", "date-time": "datetime-local", email: "email", uri: "url", url: "url" }[prop.format] || "text";
    const input = long
      ? h("textarea", { id, name, required, rows: "3" })
      : h("input", { id, name, type: inputType, required, autocomplete: "off" });
    if (typeof prop.maxLength === "number") input.setAttribute("maxlength", String(prop.maxLength));
    if (typeof prop.default === "string") input.value = prop.default;
    const parts = [labelFor(name, prop, required, id), input];
    describe(prop, input, parts);
    return {
      input,
      element: h("div", { class: "field" }, parts),
      read() {
        const v = input.value;
        if (v === "" && required) return fail(input, "required");
        if (v === "" && !required) return { ok: true, value: undefined };
        if (prop.format === "date-time" && inputType === "datetime-local") return { ok: true, value: new Date(v).toISOString() };
        return { ok: true, value: v };
      },
    };
  }

  if (type === "array" && prop.items && (mainType(prop.items) === "string" || Array.isArray(prop.items.enum))) {
    // Arrays of enums as checkboxes; arrays of strings as one entry per line.
    if (Array.isArray(prop.items.enum)) {
      const boxes = prop.items.enum.map((v) => {
        const bid = uid("f");
        const box = h("input", { id: bid, type: "checkbox" });
        return { v, box, el: h("div", { class: "field checkbox" }, box, h("label", { for: bid }, jsonText(v))) };
      });
      const legend = h("legend", {}, String(prop.title || name));
      if (required) legend.append(h("span", { class: "req", "aria-hidden": "true" }, "*"));
      const fs = h("fieldset", {}, legend, boxes.map((b) => b.el));
      return {
        input: boxes[0] ? boxes[0].box : fs,
        element: fs,
        read: () => ({ ok: true, value: boxes.filter((b) => b.box.checked).map((b) => b.v) }),
      };
    }
    const ta = h("textarea", { id, name, required, rows: "3" });
    const parts = [labelFor(name, prop, required, id), ta, h("span", { class: "hint-inline" }, "One entry per line.")];
    describe(prop, ta, parts);
    return {
      input: ta,
      element: h("div", { class: "field" }, parts),
      read() {
        const list = ta.value.split("\n").map((l) => l.trim()).filter(Boolean);
        if (!list.length && required) return fail(ta, "required");
        return { ok: true, value: list.length || required ? list : undefined };
      },
    };
  }

  // Objects, arrays of objects, unions: JSON.
  const ta = h("textarea", { id, name, required, rows: "3", spellcheck: "false", class: "json-input" });
  if (prop.default !== undefined) ta.value = JSON.stringify(prop.default, null, 2);
  const parts = [labelFor(name, prop, required, id), ta, h("span", { class: "hint-inline" }, "JSON value.")];
  describe(prop, ta, parts);
  return {
    input: ta,
    element: h("div", { class: "field" }, parts),
    read() {
      const raw = ta.value.trim();
      if (raw === "") return required ? fail(ta, "required") : { ok: true, value: undefined };
      try {
        return { ok: true, value: JSON.parse(raw) };
      } catch {
        return fail(ta, "not valid JSON");
      }
    },
  };
}

/** Normalize an OpenAI tool list to [{name, description, parameters}]. */
export function normalizeTools(tools) {
  if (!Array.isArray(tools)) return [];
  const out = [];
  for (const t of tools) {
    if (!t || typeof t !== "object") continue;
    const fn = t.function && typeof t.function === "object" ? t.function : t;
    if (typeof fn.name !== "string" || !fn.name) continue;
    out.push({
      name: fn.name,
      description: typeof fn.description === "string" ? fn.description : "",
      parameters: fn.parameters && typeof fn.parameters === "object" ? fn.parameters : { type: "object", properties: {} },
    });
  }
  return out;
}
